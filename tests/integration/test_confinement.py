"""Every path is confined to its run: traversal attacks on rebuild, read, truncate, gc, verify, purge and stage.

Two runs are written through SDM in one process into one data root whose SQLite catalog
is ``catalog.db`` inside the root (SDM's default layout): run A (application ``alpha``,
the victim) and run B (application ``beta``, the attacker), with the same values, so a
level-1 file of A is byte for byte the file of the same step of B.  Run B is then made
hostile in two ways:

* its meta-file is crafted (a write record names another file; the CRC is recomputed so
  the line is intact) and ``sdm rebuild`` must refuse it with ``IntegrityError`` naming
  the meta-file and the line, leaving the catalog byte for byte as it was;
* a catalog row of B is forged in the database (``UPDATE files SET path = ...``) and
  read, truncate, gc, purge and stage must refuse, ``verify`` must list every offending
  row.

The targets: run A's data file, the catalog, a file outside the data root reached by
``..`` (a stand-in for ``../../etc/passwd``, created here: the real one is never touched),
the same file by its absolute path, and a symbolic link inside run B's directory that
leads to it.  After every refusal the victim is intact: its bytes, size, mtime and inode.
"""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from pathlib import Path
from typing import Iterator, NamedTuple

import numpy as np
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

import sdm
from sdm._cli.main import app
from sdm.catalog import Catalog
from sdm.catalog import tiers as rows
from sdm.catalog.metafile import BACKUP, META, line_of, parse_line
from sdm.catalog.rebuild import rebuild
from sdm.errors import IntegrityError
from sdm.maintenance import gc_run, verify_run
from sdm.ops import tiers
from sdm.storage.backends.objectstore import ObjectStore

pytestmark = pytest.mark.timeout(300)

SHAPE = (8, 6)
STEPS = (0, 1, 2)
ATTACKS = ("another run's file", "the catalog", "../ out of the root", "an absolute path", "a link out of the run")
REFUSED = "SDM reads, writes and deletes only files inside a run's own directory, so the record is refused"


def field(name: str, step: int) -> np.ndarray:
    """The values of *name* at *step*, the same in both runs (built here, never read from SDM)."""
    return np.arange(np.prod(SHAPE), dtype="<f8").reshape(SHAPE) * (1 + step) + 1000 * ord(name)


def write_run(root: Path, url: str, application: str) -> int:
    with sdm.open(application, root=str(root), catalog=url) as s:
        fields = s.make_group("fields", ["T", "P"], dtype="<f8", shape=SHAPE, level=3)
        snap = s.make_group("snap", ["Q"], dtype="<f8", shape=SHAPE, level=1)
        sub = s.make_group("sub", ["S"], dtype="<f8", shape=SHAPE, level=3, subfiles=2)
        for step in STEPS:
            fields.write_step(step, {"T": field("T", step), "P": field("P", step)})
            snap.write("Q", step, field("Q", step))
            sub.write("S", step, field("S", step))
        return s.run_id


class World(NamedTuple):
    tmp: Path
    root: Path
    url: str
    a: int  # the victim run
    b: int  # the attacker run
    files: dict[tuple[int, str], str]  # (run, kind) -> path relative to the root
    outside: Path  # a file outside the data root (the stand-in for /etc/passwd)

    def run_dir(self, run: int) -> str:
        return str(Path(self.files[(run, "fields")]).parent)

    def target(self, attack: str, own: str = "fields") -> tuple[str, Path]:
        """``(path a record of run B names, the file that path reaches)`` for *attack*; *own*: which file of A
        is the victim of ``another run's file``."""
        if attack == "another run's file":
            return self.files[(self.a, own)], self.root / self.files[(self.a, own)]
        if attack == "the catalog":
            return "catalog.db", self.root / "catalog.db"
        if attack == "../ out of the root":
            return f"{self.run_dir(self.b)}/../../../outside/passwd", self.outside
        if attack == "an absolute path":
            return str(self.outside), self.outside
        link = self.root / self.run_dir(self.b) / "evil.sdm"
        if not link.is_symlink():
            link.symlink_to(self.outside)
        return f"{self.run_dir(self.b)}/evil.sdm", self.outside


@pytest.fixture
def world(tmp_path: Path) -> World:
    root = tmp_path / "root"
    url = f"sqlite:///{root}/catalog.db"
    a, b = write_run(root, url, "alpha"), write_run(root, url, "beta")
    files: dict[tuple[int, str], str] = {}
    cat = Catalog(url)
    try:
        for run in (a, b):
            for group, _, w in cat.writes(run):
                if group == "snap":
                    files[(run, f"snap{w.step}")] = w.path
                elif group == "fields":
                    files[(run, "fields")] = w.path
                else:
                    for k, e in enumerate(w.extents):
                        files[(run, f"sub{k}")] = e.path
    finally:
        cat.close()
    outside = tmp_path / "outside" / "passwd"
    outside.parent.mkdir()
    outside.write_bytes(np.arange(1 << 14, dtype="<u4").tobytes())  # 64 KiB, longer than any end a row gives
    return World(tmp_path, root, url, a, b, files, outside)


#: The catalog's tables of data (what a victim catalog must keep; SDM itself writes a run's state and its log).
DATA_TABLES = ("files", "writes", "extents", "datasets", "groups", "copies", "infos")


def state(path: Path) -> object:
    """What must not change about a victim: bytes, size, mtime, inode; for the catalog, which SDM writes itself
    (a run's state, the tier operations' log), SQLite's integrity check and every row of its data tables."""
    if path.name == "catalog.db":
        with sqlite3.connect(path) as con:
            check = con.execute("PRAGMA integrity_check").fetchall()
        rows = catalog_rows(f"sqlite:///{path}")
        return check, [rows[t] for t in DATA_TABLES]
    st = os.stat(path)
    return path.read_bytes(), st.st_size, st.st_mtime_ns, st.st_ino


def catalog_rows(url: str) -> dict[str, list[tuple]]:
    """Every row of every table, sorted: the catalog as a comparable value."""
    engine = sa.create_engine(url)
    try:
        meta = sa.MetaData()
        meta.reflect(engine)
        with engine.connect() as con:
            return {name: sorted((tuple(map(repr, r)) for r in con.execute(sa.select(t))))
                    for name, t in meta.tables.items()}
    finally:
        engine.dispose()


def forge(url: str, run: int, old: str, new: str) -> None:
    """Change the path of one of *run*'s file rows in the database, behind SDM's back."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as con:
            done = con.execute(sa.text("UPDATE files SET path = :new WHERE run_id = :run AND path = :old"),
                               {"new": new, "old": old, "run": run}).rowcount
        assert done == 1
    finally:
        engine.dispose()


def own_files(w: World, run: int) -> dict[str, bytes]:
    base = w.root / w.run_dir(run)
    return {p.name: p.read_bytes() for p in sorted(base.glob("*.sdm")) if not p.is_symlink()}


# ------------------------------------------------------------------------------------- rebuild

def craft(w: World, change, subfiled: bool = False) -> int:
    """Rewrite run B's meta-file (and its backup) with *change* applied to its first ``writes`` record (of a
    subfiled group: *subfiled*), its CRC recomputed; returns that record's line number."""
    meta = w.root / w.run_dir(w.b) / META
    lines = meta.read_bytes().split(b"\n")[:-1]
    records = [parse_line(raw.decode()) for raw in lines]
    number = next(i for i, r in enumerate(records) if r is not None and r["t"] == "writes"
                  and (not subfiled or any(x.get("extents") for x in r["writes"])))
    rec = records[number]
    change(rec)
    lines[number] = line_of(rec)[:-1]
    for path in (meta, meta.with_name(BACKUP)):
        path.write_bytes(b"\n".join(lines) + b"\n")
    return number + 1


@pytest.mark.parametrize("attack", ATTACKS)
def test_rebuild_refuses_a_write_record_outside_its_run(world: World, attack: str) -> None:
    rel, victim = world.target(attack)
    line = craft(world, lambda rec: rec["writes"][0].update(path=rel))
    meta = world.root / world.run_dir(world.b) / META
    fresh = world.tmp / "fresh.db"
    Catalog(f"sqlite:///{fresh}").close()  # an empty catalog: a rebuild would add both runs
    before = {p: p.read_bytes() for p in (fresh, world.root / "catalog.db")}
    kept = state(victim)
    for url in (f"sqlite:///{fresh}", world.url):
        with pytest.raises(IntegrityError) as err:
            rebuild(world.root, url)
        message = str(err.value)
        assert message.startswith(f"{meta} line {line} (write of ")
        assert f"names the path {rel!r}, which " in message and REFUSED in message
        assert "outside the run's directory" in message or "through '..'" in message or "is absolute" in message
    assert {p: p.read_bytes() for p in before} == before  # byte for byte
    assert state(victim) == kept


def test_rebuild_refuses_an_extent_and_a_copy_outside_the_run(world: World) -> None:
    rel, victim = world.target("another run's file", "sub1")
    meta = world.root / world.run_dir(world.b) / META
    before, kept = catalog_rows(world.url), state(victim)

    def extent(rec: dict) -> None:
        subfiled = next(x for x in rec["writes"] if x.get("extents"))
        subfiled["extents"][1]["path"] = rel

    line = craft(world, extent, subfiled=True)
    with pytest.raises(IntegrityError, match=rf"^{meta} line {line} \(write of sub/S step \d, extent 1\) names the "
                                             rf"path {rel!r}, which resolves to .*, outside the run's directory "):
        rebuild(world.root, world.url)

    def copy(rec: dict) -> None:  # restore the extent, then say the write's archive copy is another run's object
        subfiled = next(x for x in rec["writes"] if x.get("extents"))
        subfiled["extents"][1]["path"] = world.files[(world.b, "sub1")]
        subfiled["copy"] = {"tier": "archive", "location": f"s3://bucket/p/{world.files[(world.a, 'fields')]}",
                                    "size": 1, "checksum": None, "verified_at": None}

    line = craft(world, copy, subfiled=True)
    with pytest.raises(IntegrityError, match=rf"^{meta} line {line} \(write of .*\) names the archive copy "
                                             r"'s3://bucket/p/alpha/.*', which is not the object of the file "):
        rebuild(world.root, world.url)
    assert catalog_rows(world.url) == before and state(victim) == kept


def test_rebuild_refuses_a_run_record_naming_another_directory(world: World) -> None:
    meta = world.root / world.run_dir(world.b) / META
    lines = meta.read_bytes().split(b"\n")
    run = parse_line(lines[0].decode())
    run["dir"] = world.run_dir(world.a)  # B's journal claims A's directory: its writes would land there
    lines[0] = line_of(run)[:-1]
    meta.write_bytes(b"\n".join(lines))
    meta.with_name(BACKUP).write_bytes(b"\n".join(lines))
    fresh = world.tmp / "fresh.db"
    with pytest.raises(IntegrityError) as err:
        rebuild(world.root, f"sqlite:///{fresh}")
    assert str(err.value) == (
        f"{meta} line 1 (the run record) names the run directory {world.run_dir(world.a)!r}, but the meta-file lies "
        f"in {meta.parent}; a meta-file describes only the run directory it lies in, so the rebuild is refused")
    assert not fresh.exists()


def test_the_cli_rebuild_refuses_too(world: World) -> None:
    rel, _ = world.target("../ out of the root")
    line = craft(world, lambda rec: rec["writes"][0].update(path=rel))
    before = (world.root / "catalog.db").read_bytes()
    got = CliRunner().invoke(app, ["rebuild", str(world.root), "--catalog", world.url], env={"COLUMNS": "400"})
    assert got.exit_code == 1, got.output
    text = " ".join(got.output.split())
    assert text.startswith(f"error: {world.root / world.run_dir(world.b) / META} line {line} (write of "), text
    assert (world.root / "catalog.db").read_bytes() == before


def test_a_rebuild_of_intact_runs_still_works(world: World) -> None:
    (world.root / world.run_dir(world.b) / "stray.s00000009.sdm").symlink_to(world.outside)  # named by no record
    fresh = world.tmp / "fresh.db"
    report = rebuild(world.root, f"sqlite:///{fresh}")
    assert sorted(report.added) == [world.a, world.b]
    cat = Catalog(f"sqlite:///{fresh}")
    try:
        assert not [f.path for f in cat.files(world.b) if "stray" in f.path]  # a link is never a data file
    finally:
        cat.close()
    with sdm.open("beta", "r", root=str(world.root), catalog=f"sqlite:///{fresh}", run=world.b) as s:
        for step in STEPS:
            np.testing.assert_array_equal(s.group("snap").read("Q", step, verify=True), field("Q", step))


# ------------------------------------------------------------------------------------- read

@pytest.mark.parametrize("attack", ATTACKS)
def test_read_refuses_a_forged_row(world: World, attack: str) -> None:
    rel, victim = world.target(attack)
    forge(world.url, world.b, world.files[(world.b, "fields")], rel)
    kept = state(victim)
    with sdm.open("beta", "r", root=str(world.root), catalog=world.url, run=world.b) as s:
        with pytest.raises(IntegrityError) as err:
            s.group("fields").read("T", 1)
        assert str(err.value).startswith(
            f"run {world.b}'s catalog row of dataset fields/T step 1 names the path {rel!r}, which ")
        assert REFUSED in str(err.value)
        np.testing.assert_array_equal(s.group("snap").read("Q", 1, verify=True), field("Q", 1))  # the rest reads
    assert state(victim) == kept


def test_read_refuses_a_forged_subfile(world: World) -> None:
    rel, victim = world.target("another run's file", "sub1")
    forge(world.url, world.b, world.files[(world.b, "sub1")], rel)
    kept = state(victim)
    with sdm.open("beta", "r", root=str(world.root), catalog=world.url, run=world.b) as s:
        with pytest.raises(IntegrityError, match=rf"^run {world.b}'s catalog row of dataset sub/S step 0 \(extent 1\) "
                                                 rf"names the path {rel!r}, which resolves to .*, outside the run's "):
            s.group("sub").read("S", 0)
    assert state(victim) == kept


# ------------------------------------------------------------------------------------- truncate

@pytest.mark.parametrize("kind", ["deleted", "cut"])
@pytest.mark.parametrize("attack", ATTACKS)
def test_truncate_refuses_a_forged_row(world: World, attack: str, kind: str) -> None:
    own = "snap2" if kind == "deleted" else "fields"  # truncating after step 1 deletes snap's step-2 file, cuts fields
    rel, victim = world.target(attack, own)
    forge(world.url, world.b, world.files[(world.b, own)], rel)
    before, kept, mine = catalog_rows(world.url), state(victim), own_files(world, world.b)
    with sdm.open("beta", "a", root=str(world.root), catalog=world.url, run=world.b) as s:
        with pytest.raises(IntegrityError) as err:
            s.truncate(1)
        group = "snap/Q" if kind == "deleted" else "fields/"
        assert str(err.value).startswith(f"run {world.b}'s catalog row of dataset {group}")
        assert f" step 2 names the path {rel!r}, which " in str(err.value) and REFUSED in str(err.value)
    assert state(victim) == kept
    assert own_files(world, world.b) == mine
    after = catalog_rows(world.url)
    for table in DATA_TABLES:
        assert after[table] == before[table], table
    forge(world.url, world.b, rel, world.files[(world.b, own)])  # the row repaired: the truncation goes through
    with sdm.open("beta", "a", root=str(world.root), catalog=world.url, run=world.b) as s:
        done = s.truncate(1)
    assert done.removed_files == (world.files[(world.b, "snap2")],)
    assert world.files[(world.b, "fields")] in {rel for rel, _ in done.cut_files}
    assert not (world.root / world.files[(world.b, "snap2")]).exists()
    assert state(victim) == kept or attack == "the catalog"  # whose rows the truncation changed


# ------------------------------------------------------------------------------------- gc and verify

@pytest.mark.parametrize("attack", ATTACKS)
def test_gc_refuses_a_forged_row(world: World, attack: str) -> None:
    rel, victim = world.target(attack)
    forge(world.url, world.b, world.files[(world.b, "fields")], rel)  # B's own file now looks unreferenced
    before, kept, mine = catalog_rows(world.url), state(victim), own_files(world, world.b)
    cat = Catalog(world.url)
    try:
        with pytest.raises(IntegrityError) as err:
            gc_run(cat, world.b)
    finally:
        cat.close()
    assert str(err.value).startswith(f"gc of run {world.b} refused, nothing changed: 6 of its catalog rows name files "
                                     f"outside its directory: run {world.b}'s catalog row of dataset fields/")
    assert "(and 3 more; `sdm verify" in str(err.value)
    assert state(victim) == kept and own_files(world, world.b) == mine
    after = catalog_rows(world.url)
    for table in DATA_TABLES:
        assert after[table] == before[table], table


def test_gc_never_follows_a_link_in_the_run(world: World) -> None:
    victim = world.root / world.files[(world.a, "fields")]
    link = world.root / world.run_dir(world.b) / "fields.s00000007.sdm"
    link.symlink_to(victim)  # looks like an unreferenced level-1 file of B, leads to A's data
    kept, mine = state(victim), own_files(world, world.b)
    cat = Catalog(world.url)
    try:
        checked = verify_run(cat, world.b)
        assert checked.foreign == [f"{world.run_dir(world.b)}/{link.name}: a symbolic link (to {victim}); SDM makes "
                                   "none in a run's directory"]
        assert not checked.ok and checked.problems == [] and checked.unreferenced == []
        report = gc_run(cat, world.b)
    finally:
        cat.close()
    assert report.files_removed == 0 and report.not_reclaimed == [f"{checked.foreign[0]}: left as it is"]
    assert link.is_symlink() and state(victim) == kept and own_files(world, world.b) == mine


def test_verify_lists_every_offending_row(world: World) -> None:
    forged = {
        "fields": world.target("another run's file")[0],
        "snap1": world.target("../ out of the root")[0],
        "snap2": world.target("an absolute path")[0],
        "sub0": world.target("the catalog")[0],
        "sub1": world.target("a link out of the run")[0],
    }
    for own, rel in forged.items():
        forge(world.url, world.b, world.files[(world.b, own)], rel)
    kept = state(world.outside)
    cat = Catalog(world.url)
    try:
        report = verify_run(cat, world.b)
    finally:
        cat.close()
    listed = sorted((p.group, p.dataset, p.step, p.path) for p in report.outside)
    want = sorted([("fields", d, s, forged["fields"]) for d in ("T", "P") for s in STEPS]
                  + [("snap", "Q", 1, forged["snap1"]), ("snap", "Q", 2, forged["snap2"])]
                  + [("sub", "S", s, forged["sub0"]) for s in STEPS])  # a row is listed once, at its first bad file
    assert listed == want
    assert report.problems == report.outside and not report.ok
    assert all(REFUSED in p.problem for p in report.outside)
    assert report.rows == 12 and report.checksums_checked == 1  # only snap's step 0 was read
    assert state(world.outside) == kept
    got = CliRunner().invoke(app, ["verify", str(world.b), "--json", "--catalog", world.url])
    assert got.exit_code == 1
    (run,) = json.loads(got.output)["runs"]
    assert sorted((p["group"], p["dataset"], p["step"], p["path"]) for p in run["problems"]) == want


# ------------------------------------------------------------------------------------- purge and stage

@pytest.fixture
def store(s3_server, monkeypatch: pytest.MonkeyPatch) -> Iterator[ObjectStore]:
    monkeypatch.setenv("SDM_S3_ENDPOINT", s3_server.endpoint)  # where sessions find the archive
    made = ObjectStore(f"s3://sdm-confine/t-{uuid.uuid4().hex[:8]}", endpoint=s3_server.endpoint)
    made.ensure_bucket()
    yield made


def objects(store: ObjectStore) -> dict[str, bytes]:
    return {key: store.get(key) for key, _ in store.list()}


@pytest.mark.parametrize("attack", ATTACKS)
def test_purge_refuses_a_forged_row(world: World, store: ObjectStore, attack: str) -> None:
    cat = Catalog(world.url)
    try:
        tiers.migrate(cat, world.a, store)
        tiers.migrate(cat, world.b, store)
    finally:
        cat.close()
    rel, victim = world.target(attack)
    forge(world.url, world.b, world.files[(world.b, "fields")], rel)
    before, kept, mine, archived = catalog_rows(world.url), state(victim), own_files(world, world.b), objects(store)
    for tier in ("fast", "archive"):
        cat = Catalog(world.url)
        try:
            with pytest.raises(IntegrityError) as err:
                tiers.purge(cat, world.b, tier, tiers.archive_store(cat, world.b, store.endpoint))
        finally:
            cat.close()
        assert str(err.value).startswith(f"purge of run {world.b} refused, nothing changed: run {world.b}'s catalog "
                                         f"row of dataset fields/")
        assert f"names the path {rel!r}, which " in str(err.value)
    assert state(victim) == kept and own_files(world, world.b) == mine and objects(store) == archived
    after = catalog_rows(world.url)
    for table in DATA_TABLES:
        assert after[table] == before[table], table
    forge(world.url, world.b, rel, world.files[(world.b, "fields")])  # the row repaired: the purge goes through
    cat = Catalog(world.url)
    try:
        assert tiers.purge(cat, world.b, "fast").files == len(mine)
    finally:
        cat.close()
    assert own_files(world, world.b) == {}
    assert state(victim) == kept or attack == "the catalog"  # whose rows the purge changed


@pytest.mark.parametrize("attack", ATTACKS)
def test_stage_refuses_a_forged_row(world: World, store: ObjectStore, attack: str) -> None:
    own = "snap0"  # a level-1 file: A's is byte for byte B's, so every digest and checksum would match
    cat = Catalog(world.url)
    try:
        tiers.migrate(cat, world.a, store)
        tiers.migrate(cat, world.b, store)
        tiers.purge(cat, world.b, "fast")
    finally:
        cat.close()
    rel, victim = world.target(attack, own)
    assert (world.root / world.files[(world.a, own)]).read_bytes() == store.get(world.files[(world.b, own)])
    forge(world.url, world.b, world.files[(world.b, own)], rel)
    before, kept, archived = catalog_rows(world.url), state(victim), objects(store)
    cat = Catalog(world.url)
    try:
        with pytest.raises(IntegrityError) as err:
            tiers.stage(cat, world.b, tiers.archive_store(cat, world.b, store.endpoint))
    finally:
        cat.close()
    assert str(err.value).startswith(f"stage of run {world.b} refused, nothing changed: run {world.b}'s catalog row "
                                     f"of dataset snap/Q step 0 names the path {rel!r}, which ")
    assert state(victim) == kept and objects(store) == archived
    assert own_files(world, world.b) == {}  # nothing staged
    assert not list(world.root.rglob("*.staging")) and not list(world.outside.parent.glob("*.staging"))
    after = catalog_rows(world.url)
    for table in DATA_TABLES:
        assert after[table] == before[table], table


def test_read_and_purge_refuse_an_archive_copy_outside_the_run(world: World, store: ObjectStore) -> None:
    cat = Catalog(world.url)
    try:
        tiers.migrate(cat, world.a, store)
        tiers.migrate(cat, world.b, store)
        tiers.purge(cat, world.b, "fast")
    finally:
        cat.close()
    own = world.files[(world.b, "fields")]
    elsewhere = store.location(world.files[(world.a, "fields")])  # run A's object
    engine = sa.create_engine(world.url)
    try:
        with engine.begin() as con:
            done = con.execute(sa.text(
                "UPDATE copies SET location = :loc WHERE tier = 'archive' AND file_id = "
                "(SELECT id FROM files WHERE run_id = :run AND path = :path)"),
                {"loc": elsewhere, "run": world.b, "path": own}).rowcount
            assert done == 1
    finally:
        engine.dispose()
    archived = objects(store)
    with sdm.open("beta", "r", root=str(world.root), catalog=world.url, run=world.b) as s:
        with pytest.raises(IntegrityError) as err:
            s.group("fields").read("T", 1)
    assert str(err.value).startswith(
        f"run {world.b}'s catalog row of dataset fields/T step 1 names the archive copy {elsewhere!r} of {own!r}, "
        f"which is not the object of the file {own!r}")
    cat = Catalog(world.url)
    try:
        report = verify_run(cat, world.b)
        assert {(p.group, p.path) for p in report.outside} == {("fields", own)} and len(report.outside) == 6
        with pytest.raises(IntegrityError, match=rf"^purge of run {world.b} refused, nothing changed: .* names the "
                                                 rf"archive copy {elsewhere!r}"):
            tiers.purge(cat, world.b, "archive", store)
    finally:
        cat.close()
    assert objects(store) == archived


def test_superfile_members_are_confined_to_the_run(world: World, store: ObjectStore) -> None:
    own = "snap0"  # packed with the run's other small files; A's member holds the same bytes
    mine = own_files(world, world.b)
    cat = Catalog(world.url)
    try:
        for run in (world.a, world.b):
            tiers.migrate(cat, run, store, pack_below=1 << 12)
        tiers.purge(cat, world.b, "fast")
        theirs = rows.copies(cat, world.a, [world.files[(world.a, own)]])[world.files[(world.a, own)]]
        (location,) = [c.location for c in theirs if c.tier == rows.ARCHIVE]
    finally:
        cat.close()
    assert "/alpha/run-" in location and ".sdmpack@" in location
    path = world.files[(world.b, own)]
    engine = sa.create_engine(world.url)
    try:
        with engine.begin() as con:
            old = con.execute(sa.text(
                "SELECT location FROM copies WHERE tier = 'archive' AND file_id = "
                "(SELECT id FROM files WHERE run_id = :run AND path = :path)"), {"run": world.b, "path": path}).scalar()
            con.execute(sa.text("UPDATE copies SET location = :loc WHERE location = :old"), {"loc": location, "old": old})
    finally:
        engine.dispose()
    archived = objects(store)
    refusal = (f"names the archive copy {location!r} of {path!r}, which is not a superfile of the run's directory "
               f"(<archive>/{world.run_dir(world.b)}/<name>.sdmpack)")
    with sdm.open("beta", "r", root=str(world.root), catalog=world.url, run=world.b) as s:
        with pytest.raises(IntegrityError) as err:
            s.group("snap").read("Q", 0)
    assert str(err.value).startswith(f"run {world.b}'s catalog row of dataset snap/Q step 0 {refusal}")
    cat = Catalog(world.url)
    try:
        with pytest.raises(IntegrityError) as err:
            tiers.stage(cat, world.b, tiers.archive_store(cat, world.b, store.endpoint))
        assert str(err.value).startswith(f"stage of run {world.b} refused, nothing changed: run {world.b}'s catalog "
                                         f"row of dataset snap/Q step 0 {refusal}")
        assert own_files(world, world.b) == {} and objects(store) == archived
        with engine.begin() as con:  # the copy repaired: stage brings every file back
            con.execute(sa.text("UPDATE copies SET location = :old WHERE location = :loc AND file_id = "
                                "(SELECT id FROM files WHERE run_id = :run AND path = :path)"),
                        {"loc": location, "old": old, "run": world.b, "path": path})
        tiers.stage(cat, world.b, tiers.archive_store(cat, world.b, store.endpoint))
    finally:
        cat.close()
        engine.dispose()
    assert own_files(world, world.b) == mine


def test_the_remote_reads_cache_never_follows_a_link(world: World, store: ObjectStore) -> None:
    cat = Catalog(world.url)
    try:
        tiers.migrate(cat, world.b, store)
        tiers.purge(cat, world.b, "fast")
    finally:
        cat.close()
    elsewhere = world.tmp / "elsewhere"
    elsewhere.mkdir()
    cache = world.root / world.run_dir(world.b) / ".sdm-cache"
    cache.symlink_to(elsewhere)  # the cache of remote-subfile reads, planted as a link out of the run
    with sdm.open("beta", "r", root=str(world.root), catalog=world.url, run=world.b) as s:
        with pytest.raises(IntegrityError) as err:
            s.group("fields").read("T", 1, method="remote-subfile")
        assert str(err.value) == (f"subfile cache {cache} is a symbolic link (to {elsewhere}); SDM writes its cache "
                                  "only inside the run's directory: remove the link")
        assert list(elsewhere.iterdir()) == []
        cache.unlink()  # the link removed: the same read goes through the run's own cache
        np.testing.assert_array_equal(s.group("fields").read("T", 1, method="remote-subfile", verify=True),
                                      field("T", 1))
    assert list(elsewhere.iterdir()) == [] and cache.is_dir() and not cache.is_symlink()
