"""The archive tier's cost model: the paper's worked examples through ``sdm predict --tier archive``,
``T_read`` interpolation, the constants loader's errors and the MDMS choice rules.

The paper's figures (Shen, Liao, Choudhary: SRB-OL) are its equations 6 and 7 (naive vs
remote collective I/O for (Block, Block) of 1024x1024 chars on 4 ranks: 508.35 s and
11.66 s) and 9 and 10 (naive vs superfile for 10 files of 1 KB: 69.31 s and
8.14 s + T_memcopy).  Its equations write T_connclose = 0.0003 where its Table 2 says
0.00004; both give the printed figures to the hundredth, and the equations' value gives
the unrounded sums the equations add up.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sdm.catalog import Catalog
from sdm.errors import HintError, InvalidArgumentError
from sdm.planner.remote import (KEYS, SRB_HPSS_2003, RemoteConstants, RemoteWorkload, archive_target,
                                choose_remote, predict_remote)

pytestmark = pytest.mark.timeout(120)

SRC = Path(__file__).resolve().parents[2] / "src"
MB = 1 << 20

#: The paper's constants as its equations use them (T_connclose = 0.0003).
PAPER = {"T_conn": 0.71, "T_pureopen": 5.36, "T_stage": 0, "T_seek": 0.42, "T_fileclose": 0.52,
         "T_connclose": 0.0003, "T_comm": 0.15, "T_db": 0.5, "T_memcopy": 0,
         "T_read": [[8192, 0.56], [10240, 0.63], [262144, 4.5], [16 * MB, 40.16], [32 * MB, 80.32]]}


def sdm_cli(*args: str) -> subprocess.CompletedProcess:
    """``python -m sdm ARGS`` in a fresh process (the installed command's code path)."""
    return subprocess.run([sys.executable, "-m", "sdm", *args], capture_output=True, text=True, timeout=100,
                          env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "COLUMNS": "200"})


def predict_json(constants: Path, *args: str) -> dict:
    done = sdm_cli("predict", "--tier", "archive", "--constants", str(constants), "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(params=["equations", "table2"])
def paper_file(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path]:
    """The paper's constants in a JSON file: as its equations write them, or the preset from Table 2."""
    data = PAPER if request.param == "equations" else SRB_HPSS_2003.to_json()
    path = tmp_path / "paper.json"
    path.write_text(json.dumps(data))
    return request.param, path


# ----------------------------------------------------------------- worked examples
def test_paper_section_4_1_naive_vs_collective_for_block_block(paper_file: tuple[str, Path]) -> None:
    kind, path = paper_file
    out = predict_json(path, "--shape", "1024x1024", "--dtype", "S1", "--ranks", "4", "--view", "block:2x2")
    naive, coll = out["methods"]["naive"], out["methods"]["collective"]
    assert round(naive["seconds"], 2) == 508.35  # equation 6
    assert round(coll["seconds"], 2) == 11.66  # equation 7
    assert naive["requests"] == 512 and naive["fetched"] == 512 * 512  # N/2 calls of N/2 chars per rank
    assert coll["requests"] == 1 and coll["fetched"] == 1024 * 1024 // 4
    if kind == "equations":  # the sums exactly as equations 6 and 7 add them
        assert naive["seconds"] == pytest.approx(0.71 + 5.36 + 512 * (0.42 + 0.56) + 0.52 + 0.0003, abs=1e-9)
        assert coll["seconds"] == pytest.approx(0.71 + 5.36 + (0.42 + 4.5) + 0.52 + 0.0003 + 0.15, abs=1e-9)
    assert out["choice"]["method"] == "collective"
    assert out["constants_source"] == f"file {path}" and out["tier"] == "archive"


def test_paper_section_4_5_naive_vs_superfile_for_ten_small_files(paper_file: tuple[str, Path]) -> None:
    kind, path = paper_file
    out = predict_json(path, "--shape", "1024", "--dtype", "S1", "--ranks", "1", "--datasets", "10")
    naive, sup = out["methods"]["naive"], out["methods"]["superfile"]
    assert round(naive["seconds"], 2) == 69.31  # equation 9
    assert round(sup["seconds"], 2) == 8.14  # equation 10 with T_memcopy = 0
    assert sup["fetched"] == 10 * 1024 and out["workload"]["dataset_bytes"] == 1024
    if kind == "equations":
        assert naive["seconds"] == pytest.approx(0.71 + 10 * (5.36 + 0.42 + 0.56 + 0.52) + 0.0003, abs=1e-9)
        assert sup["seconds"] == pytest.approx(0.71 + 5.36 + 0.42 + 0.63 + 0.52 + 0.0003 + 0.5, abs=1e-9)
    assert out["choice"]["method"] == "superfile"


def test_the_memcopy_term_adds_to_the_superfile_once(tmp_path: Path) -> None:
    c = RemoteConstants.from_json({**PAPER, "T_memcopy": 0.25})
    w = RemoteWorkload((1024,), "S1", 1, "block", 10)
    assert predict_remote(w, c).costs["superfile"].seconds == pytest.approx(8.1403 + 0.25, abs=1e-9)


def test_the_papers_difference_formulas_hold() -> None:
    """Equation 8 (naive - collective); equation 11 (naive - superfile) plus the (n - 1) T_seek it leaves out."""
    c = RemoteConstants.from_json(PAPER)
    p = predict_remote(RemoteWorkload((1024, 1024), "S1", 4, "block:2x2"), c).costs
    n = 512
    assert p["naive"].seconds - p["collective"].seconds == pytest.approx(
        (n - 1) * c.T_seek + (n * c.read(512) - c.read(n * 512)) - c.T_comm, abs=1e-9)
    q = predict_remote(RemoteWorkload((1024,), "S1", 1, "block", 10), c).costs
    n = 10
    assert q["naive"].seconds - q["superfile"].seconds == pytest.approx(
        (n - 1) * (c.T_pureopen + c.T_stage + c.T_fileclose) + (n * c.read(1024) - c.read(n * 1024))
        - (c.T_db + c.T_memcopy) + (n - 1) * c.T_seek, abs=1e-9)


def test_the_preset_reproduces_section_3() -> None:
    c = SRB_HPSS_2003
    assert round(c.call(4096), 2) == 7.57  # Table 3's C (a call below 8 KB)
    assert round(c.call(64 * MB) - c.read(64 * MB), 2) == 7.01  # Table 3's L
    assert round(c.read(1024 * MB)) == 2570  # "when s = 1GB, T_read(s) = 2.51 x 1024 (MB) = 2570 seconds"
    assert c.read(64 * MB) - c.read(32 * MB) == pytest.approx(2.51 * 32)  # K = 2.51 s/MB beyond 16 MB


# --------------------------------------------------------------------- T_read
def test_t_read_is_linear_between_points_flat_below_and_extrapolated_beyond() -> None:
    c = RemoteConstants.from_json({**PAPER, "T_read": [[100, 1.0], [200, 3.0], [400, 4.0]]})
    assert [c.read(x) for x in (0, 50, 100, 150, 200, 300, 400)] == [1.0, 1.0, 1.0, 2.0, 3.0, 3.5, 4.0]
    assert c.read(600) == pytest.approx(5.0) and c.read(10_400) == pytest.approx(54.0)  # slope 1/200 s/B
    assert list(c.read([50, 300, 600])) == pytest.approx([1.0, 3.5, 5.0])
    one = RemoteConstants.from_json({**PAPER, "T_read": [[100, 2.0]]})
    assert [one.read(x) for x in (1, 100, 10**9)] == [2.0, 2.0, 2.0]


# ------------------------------------------------------------------- the loader
KEYLIST = ", ".join(KEYS)


@pytest.mark.parametrize("data, message", [
    ([1, 2], f"archive constants must be a JSON object with the keys {KEYLIST}; got list"),
    ({k: v for k, v in PAPER.items() if k not in ("T_db", "T_read")} | {"T_extra": 1, "t_conn": 2},
     f"archive constants: missing T_db, T_read; unknown T_extra, t_conn; the keys are exactly {KEYLIST}"),
    ({**PAPER, "T_conn": -1, "T_seek": "0.4", "T_db": True, "T_comm": float("nan")},
     "archive constants T_conn=-1, T_seek='0.4', T_comm=nan, T_db=True: each must be a number of seconds >= 0"),
    ({**PAPER, "T_read": []}, "archive constants: T_read must be a non-empty list of [bytes, seconds] points "
                              "with bytes increasing; got []"),
    ({**PAPER, "T_read": [[1, 2], [3, 4, 5]]},
     "archive constants: T_read[1]=[3, 4, 5] must be a pair [bytes, seconds] of numbers >= 0"),
    ({**PAPER, "T_read": [[10, 1], [10, 2]]},
     "archive constants: T_read[1]=[10, 2]: T_read must be a non-empty list of [bytes, seconds] points with "
     "bytes increasing"),
])
def test_the_loader_names_what_is_wrong(data: object, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as err:
        RemoteConstants.from_json(data)
    assert str(err.value) == message


def test_the_loader_round_trips_and_reads_files(tmp_path: Path) -> None:
    assert RemoteConstants.from_json(SRB_HPSS_2003.to_json()) == SRB_HPSS_2003
    assert set(SRB_HPSS_2003.to_json()) == set(KEYS)
    bad = tmp_path / "bad.json"
    bad.write_text("{T_conn: 1}")
    with pytest.raises(InvalidArgumentError, match=r"^archive constants file .*bad.json is not JSON: "):
        RemoteConstants.load(bad)
    done = sdm_cli("predict", "--tier", "archive", "--shape", "8", "--constants", str(tmp_path / "none.json"))
    assert done.returncode == 2
    assert f"error: cannot read archive constants from {tmp_path / 'none.json'}: No such file or directory" \
        in " ".join(done.stderr.split())


# ----------------------------------------------------------------- the choice
def test_a_conforming_pattern_reads_naively_without_sieving_or_collective() -> None:
    ch = choose_remote(RemoteWorkload((1024, 1024), "S1", 4, "(Block, *)"), SRB_HPSS_2003)
    assert ch.method == "naive" and ch.seconds == pytest.approx(0.71 + 5.36 + 0.42 + 4.5 + 0.52 + 0.00004)
    costs = ch.prediction.costs
    assert not costs["sieving"].eligible and not costs["collective"].eligible
    assert costs["collective"].why == "each rank's piece is one contiguous region (conforming pattern)"


def test_a_nonconforming_pattern_gets_collective_io_and_cyclic_costs_one_request_per_element() -> None:
    ch = choose_remote(RemoteWorkload((1024, 1024), "S1", 4, "cyclic"), SRB_HPSS_2003)
    assert ch.method == "collective" and ch.prediction.costs["naive"].requests == 1024 * 1024 // 4
    assert ch.reason.startswith("collective: predicted 11.66 s (vs naive ")


def test_map_views_count_runs_of_rows() -> None:
    # 1000 rows in runs of 7 dealt round robin over 4 ranks: rank 0 owns runs 0, 4, ..., 140 (36 regions)
    p = predict_remote(RemoteWorkload((1000, 3), "f8", 4, "map:7"), SRB_HPSS_2003).costs
    assert p["naive"].requests == 36 and p["naive"].fetched == 36 * 7 * 24
    assert p["subfile"].requests == 1 and p["subfile"].fetched == 1000 * 24


def test_one_rank_offers_no_collective_and_ties_go_to_the_simpler_method() -> None:
    w = RemoteWorkload((1024,), "S1", 1, "block", 10)
    ch = choose_remote(w, SRB_HPSS_2003, {"superfile_threshold": 512})
    costs = ch.prediction.costs
    assert costs["superfile"].why == "datasets of 1024 B exceed the superfile threshold 512 B"
    assert costs["naive"].seconds == costs["subfile"].seconds and ch.method == "naive"  # a tie: the simpler
    assert not choose_remote(w, SRB_HPSS_2003, {"associated": "false"}).prediction.costs["superfile"].eligible
    assert not costs["collective"].eligible  # one rank reads one region: nothing to redistribute


def test_frequent_reads_make_the_subfile_worth_its_stage() -> None:
    w = RemoteWorkload((1024, 1024), "S1", 4, "block:2x2")
    ch = choose_remote(w, SRB_HPSS_2003, {"frequency": 3})
    assert ch.method == "subfile" and ch.prediction.reads == 3
    assert ch.prediction.costs["collective"].seconds == pytest.approx(3 * 11.66004)
    assert ch.seconds == pytest.approx(predict_remote(w, SRB_HPSS_2003).costs["subfile"].seconds)


def test_the_methods_hint_restricts_or_forces() -> None:
    w = RemoteWorkload((1024, 1024), "S1", 4, "block:2x2")
    assert choose_remote(w, SRB_HPSS_2003, {"methods": "naive"}).reason == "naive: forced by the methods hint"
    assert choose_remote(w, SRB_HPSS_2003, {"methods": "naive,sieving"}).method == "sieving"
    with pytest.raises(HintError) as err:
        choose_remote(w, SRB_HPSS_2003, {"methods": "naive,fast"})
    assert str(err.value) == ("planner hint methods='naive,fast': fast is not a remote method; choose from "
                              "naive, sieving, collective, subfile, superfile")
    conforming = RemoteWorkload((1024, 1024), "S1", 4, "(Block, *)")
    with pytest.raises(HintError) as err:
        choose_remote(conforming, SRB_HPSS_2003, {"methods": "sieving,superfile"})
    assert str(err.value) == (
        "planner hint methods='sieving,superfile' leaves no remote method for this read: naive: not in the methods "
        "hint; sieving: each rank's piece is one contiguous region (conforming pattern); collective: not in the "
        "methods hint; subfile: not in the methods hint; superfile: one dataset: nothing to pack")


def test_bad_views_and_hints_are_named() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^view 'diagonal': .*write block, block:2x2"):
        predict_remote(RemoteWorkload((8, 8), "S1", 4, "diagonal"), SRB_HPSS_2003)
    with pytest.raises(InvalidArgumentError) as err:
        predict_remote(RemoteWorkload((8, 8), "S1", 4, "block:3x1"), SRB_HPSS_2003)
    assert str(err.value) == ("view 'block:3x1' on 4 ranks of shape (8, 8): process grid (3, 1) has 3 cells but the "
                              "communicator has 4 ranks; make the product of the grid equal the number of ranks")
    with pytest.raises(HintError, match=r"^planner hint superfile_threshold='big' must be bytes >= 0$"):
        choose_remote(RemoteWorkload((8,), "S1", 1, "block", 2), SRB_HPSS_2003, {"superfile_threshold": "big"})


# --------------------------------------------------------------- the catalog
def test_predict_uses_the_endpoints_calibration_else_the_paper(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/catalog.db"
    cat = Catalog(url)
    stored = {**PAPER, "T_seek": 0.02, "T_pureopen": 0.01, "T_read": [[1, 0.001], [MB, 0.01]]}
    row = cat.save_calibration(archive_target("s3://bucket/runs/"), 4, stored)
    cat.close()
    args = ("predict", "--tier", "archive", "--shape", "1024x1024", "--dtype", "S1", "--ranks", "4",
            "--view", "block:2x2", "--catalog", url, "--json")
    done = sdm_cli(*args, "--endpoint", "s3://bucket/runs")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["constants_source"].startswith(f"calibration {row} of archive:s3://bucket/runs (")
    assert out["constants"] == RemoteConstants.from_json(stored).to_json()
    expected = choose_remote(RemoteWorkload((1024, 1024), "S1", 4, "block:2x2"), RemoteConstants.from_json(stored))
    assert out["choice"]["method"] == expected.method and out["choice"]["seconds"] == expected.seconds
    other = json.loads(sdm_cli(*args, "--endpoint", "s3://other").stdout)
    assert other["constants_source"] == ("no calibration of archive:s3://other: the paper's constants "
                                         "SRB_HPSS_2003 (run `sdm calibrate s3://other`)")
    assert round(other["methods"]["naive"]["seconds"], 2) == 508.35
    plain = sdm_cli("predict", "--tier", "archive", "--shape", "1024x1024", "--dtype", "S1", "--ranks", "4",
                    "--view", "block:2x2")
    assert plain.returncode == 0 and "no --constants or --endpoint: the paper's constants SRB_HPSS_2003" in plain.stdout
    assert "collective *" in plain.stdout and "508.35" in plain.stdout


def test_the_local_tier_is_unchanged_and_refuses_archive_options() -> None:
    done = sdm_cli("predict", "--shape", "64x64", "--ranks", "2", "--json")
    assert done.returncode == 0 and "rows" in json.loads(done.stdout)
    bad = sdm_cli("predict", "--shape", "64x64", "--view", "block")
    assert bad.returncode == 2 and "add --tier archive" in bad.stderr
    tier = sdm_cli("predict", "--tier", "tape", "--shape", "64")
    assert tier.returncode == 2 and "--tier 'tape': choose local or archive" in tier.stderr
