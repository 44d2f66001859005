"""``sdm calibrate s3://...`` on the real versitygw, directly and through toxiproxy's 20 ms latency.

The stored constants have exactly the model's keys and are found by ``sdm predict --tier
archive --endpoint``; with 20 ms added to every answer, every request-priced constant is at
least 20 ms (a floor the proxy guarantees, not a timing of this machine).
"""

from __future__ import annotations

import json
import uuid

import sqlalchemy as sa
from typer.testing import CliRunner

from sdm._cli.main import app
from sdm.catalog import Catalog
from sdm.catalog import schema as S
from sdm.planner.remote import KEYS, archive_target


def cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def test_calibrate_an_object_store_and_predict_with_it(s3_server, toxiproxy, tmp_path) -> None:
    url, catalog = f"s3://sdm-calibrate/c-{uuid.uuid4().hex[:8]}", f"sqlite:///{tmp_path}/c.db"
    got = cli("calibrate", url, "--quick", "--endpoint", s3_server.endpoint, "--catalog", catalog, "--json")
    assert got.exit_code == 0, got.output
    stored = json.loads(got.output)
    assert stored["target"] == archive_target(url) and list(stored["constants"]) == list(KEYS)
    sizes = [b for b, _ in stored["constants"]["T_read"]]
    assert sizes == [4096, 65536, 1 << 20]
    seconds = [t for _, t in stored["constants"]["T_read"]]
    assert seconds == sorted(seconds) and seconds[0] > 0
    cat = Catalog(catalog)
    try:
        row = cat.latest_calibration(archive_target(url))
        assert row["id"] == stored["id"] and row["constants"] == stored["constants"]
        with cat.engine.connect() as con:  # every sample kept beside the constants
            samples = json.loads(con.execute(sa.select(S.io_calibrations.c.samples).where(
                S.io_calibrations.c.id == stored["id"])).scalar_one())
        assert set(samples) >= {"first_request", "head", "get_4096", "db", "memcopy_1MiB"}
        assert all(len(v) == 3 for v in samples.values())  # --quick: 3 repeats each
    finally:
        cat.close()
    predicted = cli("predict", "--tier", "archive", "--shape", "256x256", "--dtype", "f8", "--ranks", "4",
                    "--view", "block:2x2", "--endpoint", url, "--catalog", catalog, "--json")
    assert predicted.exit_code == 0, predicted.output
    shown = json.loads(predicted.output)
    assert shown["constants_source"].startswith(f"calibration {stored['id']} of {archive_target(url)} (")
    assert shown["constants"] == stored["constants"]

    slow = f"s3://sdm-calibrate/slow-{uuid.uuid4().hex[:8]}"
    with toxiproxy.toxic("latency", latency=20):
        got = cli("calibrate", slow, "--quick", "--endpoint", toxiproxy.endpoint, "--catalog", catalog, "--json")
    assert got.exit_code == 0, got.output
    constants = json.loads(got.output)["constants"]
    assert constants["T_pureopen"] >= 0.020 and all(t >= 0.020 for _, t in constants["T_read"])
    assert cli("calibrate", "s3://", "--catalog", catalog).exit_code != 0
