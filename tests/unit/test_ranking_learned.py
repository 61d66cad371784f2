"""The learned ranking of fused candidates (store/ranking/): the committed weights, the
features they score, the session guard, and pools it leaves alone.

The weights are the committed data file; tests/slow/test_train_ranking.py checks the
training script reproduces them.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from memoryd.store.ranking import WEIGHTS_PATH, learned
from memoryd.store.ranking.features import NAMES, features

QUESTION = "What did Priya pitch for the hackathon?"


def turn(i: int, text: str, session: str, minute: int, score: float, **stages: Any) -> dict[str, Any]:
    return {"seq": i, "id": f"m{i}", "kind": "conversation", "session_id": session, "content": text,
            "occurred_at": f"2024-03-01T10:{minute:02d}:00Z", "recorded_at": "2024-03-02T00:00:00Z",
            "score": score, "stages": stages}


def pool() -> list[dict[str, Any]]:
    """A fused pool, best first: the question about the hackathon leads; the answer to it, said
    the next minute, shares no word with the query and sits low."""
    rows = [
        turn(1, "Jonas: Hackathon is in two weeks, got an idea?", "s1", 0, 0.9,
             lexical_rank=1, lexical_score=3.0, vector_rank=1, vector_score=0.62),
        turn(3, "Priya: Perfect, badly is the hackathon standard.", "s2", 5, 0.8,
             lexical_rank=2, lexical_score=2.8, vector_rank=2, vector_score=0.58),
    ]
    for i in range(4, 14):
        rows.append(turn(i, f"Priya: other news number {i}", f"s{i}", 10, 0.5 - i * 0.01,
                         vector_rank=i, vector_score=0.45 - i * 0.005))
    # The control: the same fused score and leg figures, in a session of its own, ranked first.
    rows.append(turn(99, "Priya: Yes: a map of parcels with live free space.", "s99", 1, 0.2,
                     vector_rank=15, vector_score=0.40))
    rows.append(turn(2, "Priya: Yes: a map of lockers with live free space.", "s1", 1, 0.2,
                     vector_rank=15, vector_score=0.40))
    return rows


def test_the_weights_file_names_every_feature_in_order() -> None:
    data = json.loads(WEIGHTS_PATH.read_text())
    assert tuple(data["weights"]) == NAMES
    assert "tuning half" in data["about"]
    model = learned.load()
    assert model.weights.shape == (len(NAMES),) and np.isfinite(model.weights).all()


def test_a_weights_file_for_other_features_is_refused(tmp_path: Any) -> None:
    path = tmp_path / "weights.json"
    path.write_text(json.dumps({"intercept": 0.0, "weights": {"fused": 1.0}}))
    with pytest.raises(ValueError, match=r"train_ranking\.py --write"):
        learned.load(path)


def test_the_answer_after_a_matching_question_is_lifted_above_its_twin() -> None:
    rows = pool()
    x = features(QUESTION, rows)
    answer = len(rows) - 1  # m2, last in the pool
    assert x[answer, NAMES.index("follows_question")] == pytest.approx(1.0)
    assert x[answer, NAMES.index("neighbour_best")] == pytest.approx(1.0)
    assert x[1, NAMES.index("follows_hit")] == 0.0  # its session's other turn is hours away
    ranked = [r["id"] for r in learned.order(QUESTION, rows, k=10, explain=True)]
    assert ranked.index("m2") < ranked.index("m99")
    assert ranked.index("m2") <= len(rows) - 4
    # Control: in fused order it comes after its twin, last.
    fused = [r["id"] for r in rows]
    assert fused.index("m2") > fused.index("m99")


def test_every_session_of_the_fused_top_k_keeps_a_row() -> None:
    fused = list(range(6))
    session_of = ["a", "b", "c", "a", "a", "a"]
    learned_order = [0, 3, 4, 5, 1, 2]  # the model alone would drop session c from a top 4
    top = learned.guarded(fused, learned_order, session_of, k=4)[:4]
    assert {session_of[i] for i in top} == {"a", "b", "c"}
    assert sorted(learned.guarded(fused, learned_order, session_of, k=4)) == fused  # nothing lost
    assert learned.guarded(fused, [0, 1, 2, 3, 4, 5], session_of, k=4) == [0, 1, 2, 3, 4, 5]


def test_a_pool_without_conversation_turns_keeps_its_fused_order() -> None:
    rows = [{**r, "kind": "fact", "session_id": None} for r in pool()]
    assert [r["id"] for r in learned.order(QUESTION, rows, k=10)] == [r["id"] for r in rows]
    assert learned.order(QUESTION, rows, k=10)[0]["score"] == rows[0]["score"]


def test_a_question_is_found_by_the_answer_said_after_it() -> None:
    rows = pool()
    x = features(QUESTION, rows)
    question = 0  # m1 asks; m2, its answer a minute later, is last in the pool
    assert x[question, NAMES.index("precedes_hit")] == pytest.approx(rows[-1]["score"] / rows[0]["score"])
    # Control: the answer has nothing said after it in its session.
    assert x[len(rows) - 1, NAMES.index("precedes_hit")] == 0.0


def test_length_counts_a_turns_words_up_to_a_cap() -> None:
    rows = [turn(1, "Sam: Yes!", "s1", 0, 0.5), turn(2, "Sam: " + "word " * 80, "s2", 0, 0.4)]
    x = features(QUESTION, rows)
    assert x[0, NAMES.index("length")] == pytest.approx(2 / 40)  # "Sam", "Yes"
    assert x[1, NAMES.index("length")] == 1.0


def test_names_counts_the_querys_names_said_in_the_text_not_its_speaker() -> None:
    rows = [turn(1, "Jonas: Priya pitched the map.", "s1", 0, 0.5),
            turn(2, "Priya: I pitched the map.", "s2", 0, 0.4)]
    x = features(QUESTION, rows)  # "What did Priya pitch ...": "What" starts it, "Priya" is a name
    assert x[0, NAMES.index("names")] == 1.0
    assert x[1, NAMES.index("names")] == 0.0  # the speaker prefix is speaker_named's
    assert x[1, NAMES.index("speaker_named")] == 1.0
