"""``python -m sdm ...`` runs the ``sdm`` command line."""

from __future__ import annotations

from sdm._cli.main import main

if __name__ == "__main__":
    main()
