"""JSON-RPC 2.0 framing: one JSON object per line."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from memoryd.errors import InvalidRequest, MemorydError, ParseError
from memoryd.masking import mask_url

_NO_ID = object()


@dataclass
class Request:
    method: str
    params: dict[str, Any]
    id: Any  # None for a request with "id": null; _NO_ID for a notification

    @property
    def is_notification(self) -> bool:
        return self.id is _NO_ID


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} does not fit a double")
    return value


def decode(line: bytes) -> Request:
    """Parse one frame; raise ParseError or InvalidRequest (with ``id`` in data when known)."""
    try:
        # Strict JSON: Python would accept NaN/Infinity and overflow 1e400 to inf, and then
        # echo them back in a reply that no JSON parser reads.
        # Frames are UTF-8 (PROTOCOL.md); json.loads would guess UTF-16 or UTF-32 from raw bytes.
        # A leading byte order mark is ignored, as RFC 8259 allows.
        text = line.decode("utf-8-sig")
        obj = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, the hooks, int digit limit
        raise ParseError(f"the frame is not valid JSON ({exc}); send one JSON object per line") from exc
    except RecursionError:
        raise ParseError("the frame nests too deeply to parse; send a flatter JSON object") from None
    if isinstance(obj, list):
        raise InvalidRequest("batches (JSON arrays) are not supported; send one request per line")
    if not isinstance(obj, dict):
        raise InvalidRequest("the frame must be a JSON-RPC 2.0 request object")
    req_id = obj.get("id", _NO_ID)
    if (req_id is not _NO_ID and not (req_id is None or isinstance(req_id, str | int | float))) \
            or isinstance(req_id, bool):
        raise InvalidRequest("'id' must be a string, a number or null")
    err_id = None if req_id is _NO_ID else req_id
    if obj.get("jsonrpc") != "2.0":
        raise _invalid("'jsonrpc' must be \"2.0\"", err_id)
    method = obj.get("method")
    if not isinstance(method, str) or not method:
        raise _invalid("'method' must be a non-empty string", err_id)
    params = obj.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise _invalid("'params' must be an object (named parameters)", err_id)
    return Request(method=method, params=params, id=req_id)


def _invalid(message: str, req_id: Any) -> InvalidRequest:
    err = InvalidRequest(message)
    err.request_id = req_id  # type: ignore[attr-defined]
    return err


def encode_result(req_id: Any, result: Any) -> bytes:
    return _line({"jsonrpc": "2.0", "id": req_id, "result": result})


def encode_error(req_id: Any, error: MemorydError) -> bytes:
    body = error.to_json()
    # An error may quote a driver's or a server's message, which can carry a configured URL:
    # its credentials never reach a client (protocol 1.2, secrets).
    body["message"] = mask_url(body["message"])
    return _line({"jsonrpc": "2.0", "id": req_id, "error": body})


def _line(obj: dict[str, Any]) -> bytes:
    try:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        # A lone surrogate (sent escaped, e.g. in an id or a parameter's name) has no UTF-8 form:
        # escape all non-ASCII text instead, which a JSON parser reads back as it was sent.
        return json.dumps(obj, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"
