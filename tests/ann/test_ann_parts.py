"""A large owner's rows split into HNSW graphs of bounded size (store/annindex/parts.py): each
row in the one part its seq names, new parts only at the top, searches merging every part, and
the parts saved, reloaded, caught up and erased as one owner's graph was."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import Engine, text

from memoryd.store.annindex.graph import OwnerIndex
from memoryd.store.annindex.index_set import AnnSet
from memoryd.store.annindex.parts import OwnerGraphs
from tests.ann._store import DIM, clustered
from tests.ann.conftest import BIG, OTHER, SMALL
from tests.ann.test_ann_set import approx, exact, index_bytes, seq_list

MIN_ROWS = 2000
PART_ROWS = 1000


def parted(labels: range, part_rows: int = PART_ROWS, seed: int = 3) -> tuple[OwnerGraphs, np.ndarray]:
    vecs = clustered(len(labels), seed=seed)
    graphs = OwnerGraphs(1, DIM, part_rows=part_rows)
    graphs.add(list(labels), vecs)
    return graphs, vecs


def test_rows_fill_a_part_then_start_the_next_at_the_first_row_above_it() -> None:
    graphs, _ = parted(range(1, 2501))
    assert graphs.los == [0, 1001, 2001]
    assert [int(p.index.element_count) for p in graphs.parts] == [1000, 1000, 500]
    assert graphs.parts[1].labels() == set(range(1001, 2001))
    more = clustered(501, seed=4)
    graphs.add(list(range(2501, 3002)), more)
    assert graphs.los == [0, 1001, 2001, 3001]  # the third part filled to 1,000, then 3001 began one
    assert graphs.parts[3].labels() == {3001}
    assert graphs.labels() == set(range(1, 3002)) and graphs.count() == 3001


def test_a_row_that_comes_back_returns_to_the_part_its_seq_names() -> None:
    graphs, vecs = parted(range(1, 2501))
    assert graphs.erase(1500) and not graphs.contains(1500)
    graphs.add([1500, 2600], np.stack([vecs[1499], vecs[0]]))
    assert graphs.parts[1].contains(1500) and graphs.parts[2].contains(2600)
    assert all(not p.contains(1500) for i, p in enumerate(graphs.parts) if i != 1)
    assert graphs.los == [0, 1001, 2001]


def test_a_full_last_part_takes_an_older_row_rather_than_split_below_its_top() -> None:
    """A new part starts only above every label the last part ever held, so no row's part
    changes: 1,999 (erased, then back) stays in the second part although it is full."""
    graphs, vecs = parted(range(1, 2001))
    graphs.erase(1999)
    graphs.add([1999], vecs[1998:1999])
    assert graphs.los == [0, 1001] and graphs.parts[1].contains(1999)


def test_a_search_merges_every_part_and_finds_what_one_graph_finds() -> None:
    graphs, vecs = parted(range(1, 4001))
    whole = OwnerIndex(1, DIM)
    whole.add(list(range(1, 4001)), vecs)
    queries = clustered(40, seed=11)
    exact_top = np.argsort(-(queries @ vecs.T), axis=1)[:, :10] + 1
    split = np.mean([len({h for h, _ in graphs.search(q, 10, 64, None)} & set(top)) / 10
                     for q, top in zip(queries, exact_top, strict=True)])
    one = np.mean([len({h for h, _ in whole.search(q, 10, 64, None)} & set(top)) / 10
                   for q, top in zip(queries, exact_top, strict=True)])
    assert len(graphs.parts) == 4
    assert split >= 0.95 and split >= one - 0.02, (split, one)


def test_a_full_part_keeps_no_spare_slots() -> None:
    """hnswlib allocates every slot of a graph's capacity (about 1.8 KB each at M 32): a part
    grows to part_rows and no further, where one graph kept a quarter more than it held."""
    graphs = OwnerGraphs(1, DIM, part_rows=3000)
    vecs = clustered(7000, seed=8)
    for start in range(0, 7000, 500):
        graphs.add(list(range(start + 1, start + 501)), vecs[start:start + 500])
    assert [p.index.get_max_elements() for p in graphs.parts[:2]] == [3000, 3000]
    assert graphs.labels() == set(range(1, 7001))
    graphs.erase(10)
    graphs.add([10], vecs[9:10])  # an old row back in a full part: it grows past part_rows
    assert graphs.parts[0].contains(10)


def test_parts_must_start_at_zero_in_increasing_order() -> None:
    with pytest.raises(ValueError, match="do not start at 0"):
        OwnerGraphs(1, DIM, parts=[(5, OwnerIndex(1, DIM))])
    with pytest.raises(ValueError):
        OwnerGraphs(1, DIM, part_rows=0)


# -- the parts in an AnnSet beside a store --------------------------------------------------------
def opened(engine: Engine, directory: Path, part_rows: int = PART_ROWS) -> AnnSet:
    ann = AnnSet(engine, directory, min_rows=MIN_ROWS, threads=2, save_every=10**9, part_rows=part_rows)
    ann.open()
    return ann


def owner_ids(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {str(k): int(v) for k, v in conn.execute(text("SELECT scope_key, id FROM vector_owners"))}


def test_a_large_owner_is_built_in_parts_and_saved_one_file_each(owners_store) -> None:
    engine, seqs, _, directory = owners_store
    ann = opened(engine, directory)
    ids = owner_ids(engine)
    big, other = ann.indexes[ids[BIG]], ann.indexes[ids[OTHER]]
    assert (len(big.parts), len(other.parts)) == (6, 3)
    assert big.labels() == set(seqs[BIG]) and other.labels() == set(seqs[OTHER])
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["format"] == 3
    entry = manifest["owners"][str(ids[BIG])]
    assert [p["lo"] for p in entry["parts"]] == big.los == [0, *seqs[BIG][1000::1000]]
    assert sorted(p.name for p in directory.glob("*.hnsw")) == sorted(
        p["file"] for e in manifest["owners"].values() for p in e["parts"])
    assert ann.status()["parts"] == 9 and ann.status()["graphs"] == 2


def test_recall_across_parts_and_owners_against_the_exact_scan(owners_store) -> None:
    engine, _, _, directory = owners_store
    ann = opened(engine, directory)
    keys = [BIG, OTHER, SMALL]
    overlap = [len(set(approx(engine, ann, q, 40, keys)[:10]) & set(exact(engine, q, 10, keys))) / 10
               for q in clustered(50, seed=99)]
    assert np.mean(overlap) >= 0.95, np.mean(overlap)


def test_a_kind_is_applied_inside_every_part(owners_store) -> None:
    engine, seqs, vecs, directory = owners_store
    ann = opened(engine, directory)
    query = vecs[seqs[BIG][10] - 1]
    got = approx(engine, ann, query, 30, [BIG], kind="decision")
    truth = exact(engine, query, 30, [BIG], kind="decision")
    assert len(got) == 30 and len(set(got) & set(truth)) >= 27
    with engine.connect() as conn:
        kinds = {r[0] for r in conn.execute(text(f"SELECT DISTINCT kind FROM memories WHERE seq IN "
                                                 f"({seq_list(got)})"))}
    assert kinds == {"decision"}


def test_a_forgotten_vector_leaves_its_part_and_every_file(owners_store) -> None:
    engine, seqs, _, directory = owners_store
    ann = opened(engine, directory)
    victim = seqs[BIG][4321]
    graphs = ann.indexes[owner_ids(engine)[BIG]]
    part = graphs.part_of(victim)
    assert part is graphs.parts[4]
    stored = graphs.vector(victim).tobytes()
    assert stored in index_bytes(directory)  # positive control
    with engine.begin() as conn:
        conn.execute(text("UPDATE memories SET content = NULL, status = 'forgotten' WHERE seq = :s"),
                     {"s": victim})
    ann.catch_up()
    assert not graphs.contains(victim) and stored not in index_bytes(directory)
    ann.save()
    assert stored not in index_bytes(directory)


def test_new_rows_past_a_full_part_start_one_that_survives_a_crash(owners_store, tmp_path: Path) -> None:
    """Rows written after the save go into a new part; killed before the next save, the daemon
    loads the saved parts and catches up from the log, each row in one part, once."""
    engine, seqs, vecs, directory = owners_store
    ann = opened(engine, directory)
    big = owner_ids(engine)[BIG]
    moved = seqs[SMALL][:250]  # above every BIG row: they fill the last part (full) -> a new part
    with engine.begin() as conn:
        conn.execute(text("UPDATE memories SET scope = 'agent', owner = 'big', agent_id = 'big', "
                          f"user_id = NULL WHERE seq IN ({seq_list(moved)})"))
    ann.catch_up()
    assert ann.indexes[big].los[-1] == moved[0] and ann.indexes[big].parts[-1].labels() == set(moved)
    forgotten = seqs[BIG][:50]
    with engine.begin() as conn:
        conn.execute(text(f"DELETE FROM memories WHERE seq IN ({seq_list(forgotten)})"))
    del ann  # no save: as if killed
    again = opened(engine, directory)
    assert again.loaded_graphs == 2  # the saved parts, caught up from the log, not rebuilt
    graphs = again.indexes[big]
    truth = (set(seqs[BIG]) - set(forgotten)) | set(moved)
    assert graphs.labels() == truth
    seen: set[int] = set()
    for part in graphs.parts:
        assert not part.labels() & seen
        seen |= part.labels()
    assert approx(engine, again, vecs[moved[5] - 1], 1, [BIG]) == [moved[5]]


def test_a_format_2_set_is_loaded_as_one_part_an_owner(owners_store) -> None:
    """Graphs saved before parts existed are kept, not rebuilt: one part each, new parts above."""
    engine, seqs, _, directory = owners_store
    opened(engine, directory, part_rows=100_000)
    path = directory / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["format"] = 2
    manifest["owners"] = {o: {"file": e["parts"][0]["file"], "count": e["parts"][0]["count"]}
                          for o, e in manifest["owners"].items()}
    path.write_text(json.dumps(manifest))
    again = opened(engine, directory)
    big = again.indexes[owner_ids(engine)[BIG]]
    assert again.loaded_graphs == 2 and len(big.parts) == 1 and big.labels() == set(seqs[BIG])
    assert json.loads(path.read_text())["format"] == 2  # nothing changed, nothing saved


def test_a_graph_past_half_a_part_is_searched_at_split_ef_unless_a_kind_filters(
        owners_store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph holding more than part_rows / 2 vectors at vector_index_split_ef (one graph of
    100,000 finds 0.92 of the exact top 10 at ef 512 on crowded real vectors, 50,000 find
    0.97), whether it is a full part of a split owner or a whole owner's graph; a smaller
    graph, and any graph in a search by kind, at ef."""
    engine, _, vecs, directory = owners_store
    ann = AnnSet(engine, directory, min_rows=MIN_ROWS, save_every=10**9, part_rows=4000, ef=64, split_ef=96)
    ann.open()
    ids = owner_ids(engine)
    big, other = ann.indexes[ids[BIG]], ann.indexes[ids[OTHER]]
    # BIG's 6,000 rows: a full part of 4,000 and one of 2,000 (not past half); OTHER's 3,000 in one.
    assert [int(p.index.element_count) for p in big.parts] == [4000, 2000]
    assert [int(p.index.element_count) for p in other.parts] == [3000]
    seen: list[tuple[int, int, int]] = []
    search = OwnerIndex.search

    def recording(self: OwnerIndex, query: np.ndarray, k: int, ef: int, allowed):  # type: ignore[no-untyped-def]
        seen.append((self.owner_id, int(self.index.element_count), ef))
        return search(self, query, k, ef, allowed)

    monkeypatch.setattr(OwnerIndex, "search", recording)
    approx(engine, ann, vecs[0], 10, [BIG, OTHER])
    assert sorted(seen) == sorted([(ids[BIG], 4000, 96), (ids[BIG], 2000, 64), (ids[OTHER], 3000, 96)])
    seen.clear()
    approx(engine, ann, vecs[0], 10, [BIG, OTHER], kind="decision")
    assert sorted(seen) == sorted([(ids[BIG], 4000, 64), (ids[BIG], 2000, 64), (ids[OTHER], 3000, 64)])
