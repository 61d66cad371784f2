"""An owner past ``flat_rows`` scanned flat as float16 codes (store/annindex/flat.py): the exact
nearest rows, a kind applied inside the scan, erased codes zeroed and never found, no file, and
built again from the store at each start."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import Engine, text

from memoryd.store.annindex import flat as flat_mod
from memoryd.store.annindex.flat import FlatOwner
from memoryd.store.annindex.index_set import AnnSet, KindFilter
from memoryd.store.annindex.parts import OwnerGraphs
from tests.ann._store import DIM, clustered
from tests.ann.conftest import BIG, OTHER, SMALL
from tests.ann.test_ann_set import approx, exact, index_bytes


def exact_top(vecs: np.ndarray, labels: np.ndarray, query: np.ndarray, k: int) -> list[int]:
    unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    return [int(labels[i]) for i in np.argsort(-(unit @ query))[:k]]


def filled(n: int, seed: int = 3, slices: int = 2) -> tuple[FlatOwner, np.ndarray, np.ndarray]:
    vecs = clustered(n, seed=seed) * 3.0  # not unit length: the owner normalises
    labels = np.arange(1, n + 1, dtype=np.int64) * 7  # labels are seqs, not slots
    owner = FlatOwner(1, DIM, slices=slices)
    owner.add(list(labels), vecs)
    return owner, vecs, labels


def test_a_flat_owner_finds_the_exact_nearest_rows() -> None:
    owner, vecs, labels = filled(5000)
    assert owner.count() == 5000 and [p.size() for p in owner.parts] == [2500, 2500]
    found = []
    for query in clustered(40, seed=11):
        hits = owner.search(query, 10)
        truth = exact_top(vecs, labels, query, 10)
        found.append(len({h for h, _ in hits} & set(truth)) / 10)
        unit = vecs[(np.asarray([h for h, _ in hits]) // 7) - 1]
        unit /= np.linalg.norm(unit, axis=1, keepdims=True)
        # Cosine distances, as hnswlib's space gives them, to float16's precision.
        assert np.allclose([d for _, d in hits], 1 - unit @ query, atol=2e-3)
        assert [d for _, d in hits] == sorted(d for _, d in hits)
    assert np.mean(found) >= 0.99, np.mean(found)


def test_an_erased_label_is_never_found_and_its_codes_and_vector_are_zeros() -> None:
    owner, vecs, labels = filled(3000)
    victim = int(labels[1234])
    part = owner._slice(victim)
    slot = part._slot(victim)
    codes, fine = part._codes()[slot].tobytes(), part.fine[slot].tobytes()
    assert part._codes().tobytes().count(codes) == 1 and fine in part.fine.tobytes()  # positive control
    assert owner.erase(victim) and not owner.contains(victim) and not owner.erase(victim)
    assert not part._codes()[slot].any() and not part.fine[slot].any()
    assert codes not in part._codes().tobytes() and fine not in part.fine.tobytes()
    hits = owner.search(vecs[1234], 10)
    assert victim not in {h for h, _ in hits} and len(hits) == 10
    assert owner.count() == 2999


def test_a_label_written_again_keeps_one_slot_and_an_erased_one_comes_back() -> None:
    owner, vecs, labels = filled(2000)
    label = int(labels[10])
    size = sum(p.size() for p in owner.parts)
    owner.add([label], vecs[500:501])  # re-embedded: overwritten in place
    assert sum(p.size() for p in owner.parts) == size
    assert owner.search(vecs[500], 2)[0][0] in {label, int(labels[500])}
    assert owner.same(label, vecs[500]) and not owner.same(label, vecs[10])
    owner.erase(label)
    owner.add([label, label], np.stack([vecs[10], vecs[11]]))  # the last of a label given twice
    assert owner.contains(label) and owner.same(label, vecs[11]) and owner.count() == 2000


def test_a_kind_filter_runs_inside_the_scan() -> None:
    owner, vecs, labels = filled(4000)
    codes = np.zeros(int(labels.max()) + 1, dtype=np.uint8)
    codes[labels] = 1
    codes[labels[::10]] = 2  # a rare kind: every tenth row
    query = clustered(1, seed=5)[0]
    hits = owner.search(query, 30, allowed=KindFilter(codes, 2))
    assert len(hits) == 30 and all(codes[h] == 2 for h, _ in hits)
    rare = np.arange(0, 4000, 10)
    assert {h for h, _ in hits} == set(exact_top(vecs[rare], labels[rare], query, 30))
    # A plain callable filter gives the same rows (a graph's kind of filter).
    plain = owner.search(query, 30, allowed=lambda label: int(codes[label]) == 2)
    assert {h for h, _ in plain} == {h for h, _ in hits}
    assert owner.search(query, 10, allowed=KindFilter(codes, None)) == []


def test_a_slice_with_many_erased_slots_compacts_and_finds_the_same_rows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flat_mod, "COMPACT_MIN", 100)
    owner, vecs, labels = filled(2000, slices=1)
    part = owner.parts[0]
    gone = labels[:300]
    for label in gone:
        owner.erase(int(label))
    assert part.size() < 2000 and part.erased < 100  # compacted at least once
    assert part.size() - part.erased == owner.count() == 1700
    keep = np.arange(300, 2000)
    for query in clustered(10, seed=2):
        hits = {h for h, _ in owner.search(query, 10)}
        assert len(hits & set(exact_top(vecs[keep], labels[keep], query, 10))) >= 9
        assert not hits & set(gone.tolist())
    owner.add([int(labels[0])], vecs[:1])  # back, after its slot was compacted away
    assert owner.search(vecs[0], 1)[0][0] == int(labels[0])


def test_fewer_live_rows_than_asked() -> None:
    owner, _, labels = filled(6)
    for label in labels[:3]:
        owner.erase(int(label))
    assert sorted(h for h, _ in owner.search(clustered(1, seed=1)[0], 10)) == sorted(labels[3:].tolist())
    assert FlatOwner(2, DIM).search(clustered(1, seed=1)[0], 10) == []


# -- in an AnnSet beside a store ----------------------------------------------------------------
def opened(engine: Engine, directory: Path, flat_rows: int = 5000) -> AnnSet:
    ann = AnnSet(engine, directory, min_rows=2000, threads=2, save_every=10**9, part_rows=1000,
                 flat_rows=flat_rows)
    ann.open()
    return ann


def owner_id(engine: Engine, key: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT id FROM vector_owners WHERE scope_key = :k"),
                                {"k": key}).scalar_one())


def test_an_owner_past_flat_rows_is_scanned_and_finds_what_the_exact_scan_finds(owners_store) -> None:
    engine, seqs, _, directory = owners_store
    ann = opened(engine, directory)
    big, other = owner_id(engine, BIG), owner_id(engine, OTHER)
    assert isinstance(ann.indexes[big], FlatOwner) and isinstance(ann.indexes[other], OwnerGraphs)
    assert ann.indexes[big].labels() == set(seqs[BIG])
    assert ann.sizes() == {"graphs": 1, "parts": 3, "vectors_in_graphs": 3000, "flat_owners": 1,
                           "vectors_scanned_flat": 6000}
    assert ann.status()["flat_rows"] == 5000
    keys = [BIG, OTHER, SMALL]
    overlap = [len(set(approx(engine, ann, q, 10, keys)) & set(exact(engine, q, 10, keys))) / 10
               for q in clustered(30, seed=99)]
    assert np.mean(overlap) >= 0.97, np.mean(overlap)
    query = clustered(1, seed=5)[0]
    # float16 inner products: the exact rows but for a near tie now and then.
    assert len(set(approx(engine, ann, query, 20, [BIG])) & set(exact(engine, query, 20, [BIG]))) >= 19
    decisions = approx(engine, ann, query, 30, [BIG], kind="decision")
    assert len(decisions) == 30
    assert len(set(decisions) & set(exact(engine, query, 30, [BIG], kind="decision"))) >= 29


def test_a_flat_owner_has_no_file_and_is_built_again_from_the_store_at_start(owners_store) -> None:
    engine, seqs, _, directory = owners_store
    ann = opened(engine, directory)
    ann.save()
    big = owner_id(engine, BIG)
    manifest = json.loads((directory / "manifest.json").read_text())
    assert str(big) not in manifest["owners"] and len(manifest["owners"]) == 1
    assert all(f"owner-{big}-" not in path.name for path in directory.iterdir())
    victim = seqs[BIG][77]
    stored = ann.indexes[big].vector(victim)
    with engine.begin() as conn:  # changed after the save, then a kill -9: no save, no catch-up
        conn.execute(text("UPDATE memories SET content = NULL, status = 'forgotten' WHERE seq = :s"),
                     {"s": victim})
    del ann
    again = opened(engine, directory)
    assert again.loaded_graphs == 1 and isinstance(again.indexes[big], FlatOwner)
    assert again.indexes[big].labels() == set(seqs[BIG]) - {victim}
    assert stored.astype(np.float16).tobytes() not in index_bytes(directory)


def test_a_forgotten_vector_leaves_the_flat_codes(owners_store) -> None:
    engine, seqs, vecs, directory = owners_store
    ann = opened(engine, directory)
    flat = ann.indexes[owner_id(engine, BIG)]
    victim = seqs[BIG][300]
    assert approx(engine, ann, vecs[300], 1, [BIG]) == [victim]  # BIG's rows come first
    with engine.begin() as conn:
        conn.execute(text("UPDATE memories SET content = NULL, status = 'forgotten' WHERE seq = :s"),
                     {"s": victim})
    ann.catch_up()
    assert not flat.contains(victim)
    assert victim not in approx(engine, ann, vecs[300], 10, [BIG])


def test_an_owner_with_graphs_that_reaches_flat_rows_trades_them_for_a_scan(owners_store) -> None:
    engine, seqs, _, directory = owners_store
    opened(engine, directory, flat_rows=0).save()  # graphs for both, saved
    big = owner_id(engine, BIG)
    assert any(f"owner-{big}-" in path.name for path in directory.iterdir())
    again = opened(engine, directory)
    assert isinstance(again.indexes[big], FlatOwner) and again.indexes[big].labels() == set(seqs[BIG])
    again.save()
    assert all(f"owner-{big}-" not in path.name for path in directory.iterdir())  # its graphs' files gone
