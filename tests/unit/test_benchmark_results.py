"""The kept benchmark results: small, and each names the SDM version and git commit it measured."""
import json
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def test_results_stay_under_one_megabyte():
    files = [p for p in RESULTS.iterdir() if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    assert files and total < 1_000_000, f"benchmarks/results holds {total} bytes in {len(files)} files"
    held = sum(-(-p.stat().st_size // 4096) * 4096 for p in files)  # as `du` counts them, in 4 KiB blocks
    assert held < 1 << 20, f"benchmarks/results takes {held // 1024} KiB in {len(files)} files"


def test_every_result_names_its_version_and_commit():
    for p in sorted(RESULTS.glob("*.json")):
        text = p.read_text()
        json.loads(text)
        assert '"sdm_version"' in text, p.name
        assert re.search(r'"(git_)?commit": ?"[0-9a-f]{40}', text), p.name


def test_every_table_names_its_version_and_commit():
    for p in sorted(RESULTS.glob("*.md")):
        text = p.read_text()
        assert re.search(r"SDM \d+\.\d+\.\d+", text), p.name
        assert re.search(r"\b[0-9a-f]{12,40}\b", text), p.name
