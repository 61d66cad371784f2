"""The importer's requests: vectors sent unless --no-vectors, batches that fit a request frame.

Scripted: ``call`` records what the importer would send to memory.write_many and answers as a
daemon does. tests/integration/test_import_vectors.py runs the same importer against real
daemons on both backends.
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

from memoryd.exchange import exportfile
from memoryd.exchange.importer import DEFAULT_BATCH_BYTES, Importer

HEADER = {"record": "header", "format": "memoryd-export", "format_version": 1, "memoryd_version": "t",
          "exported_at": "2025-01-01T00:00:00.000000Z", "filters": {}, "with_vectors": True, "total": 0}
#: The daemon's default max_frame_bytes.
FRAME = 1 << 20


def _export(n: int, content_bytes: int = 200) -> exportfile.Reader:
    vector = {"model": "m", "dim": 384, "encoding": "f32le-base64", "content_hash": "0" * 64,
              "data": base64.b64encode(bytes(384 * 4)).decode()}
    lines = [json.dumps(HEADER)]
    for i in range(n):
        lines.append(json.dumps({"record": "memory", "id": f"m{i}", "content": f"{i} " + "é" * content_bytes,
                                 "scope": "agent", "agent_id": "a1", "recorded_at": "2025-01-01T00:00:00Z",
                                 "vector": vector}))
    lines.append(json.dumps({"record": "end", "count": n}))
    return exportfile.Reader(io.BytesIO(("\n".join(lines) + "\n").encode()))


def _recorder() -> tuple[list[dict[str, Any]], Any]:
    sent: list[dict[str, Any]] = []

    def call(method: str, params: dict[str, Any]) -> Any:
        assert method == "memory.write_many"
        sent.append(params)
        return {"results": [{"id": f"new{len(sent)}-{i}", "queued": [], "vector_kept": True}
                            for i in range(len(params["items"]))]}

    return sent, call


def test_vectors_are_sent_in_restore_unless_told_not_to() -> None:
    sent, call = _recorder()
    summary = Importer(call).run(_export(3))
    assert [item["restore"]["vector"]["dim"] for item in sent[0]["items"]] == [384] * 3
    assert summary.vectors_kept == 3
    sent, call = _recorder()
    Importer(call, keep_vectors=False).run(_export(3))
    assert all("vector" not in item["restore"] for item in sent[0]["items"])


def test_batches_with_vectors_stay_under_the_request_frame() -> None:
    sent, call = _recorder()
    export = _export(1200)
    summary = Importer(call, batch_size=500, batch_bytes=DEFAULT_BATCH_BYTES).run(export)
    assert summary.written == 1200 and sum(len(p["items"]) for p in sent) == 1200
    # As the client encodes a request (json.dumps, ASCII escapes): 500 such records are ~1.6 MB.
    sizes = [len(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "memory.write_many", "params": p}))
             for p in sent]
    assert len(sent) > 3 and max(sizes) < FRAME, sizes
