"""Request parsing and error bodies exactly as SGLang's HTTP server produces them.

FastAPI body validation failures become HTTP 400
``{"object":"error","message":…,"type":"Bad Request","param":null,"code":400}`` (SGLang's
``validation_exception_handler``); errors raised while handling become ``{"error":{"message":…}}``
(``_create_error_response``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from sps_sim.engine import Request
from sps_sim.http_wire import Response, json_response

DEFAULT_MAX_NEW_TOKENS = 128


@dataclass(frozen=True)
class HttpError:
    status: int
    body: dict[str, Any]

    def response(self) -> Response:
        return json_response(self.body, status=self.status)


def validation_error(errors: list[dict[str, Any]]) -> HttpError:
    """FastAPI RequestValidationError rendered by SGLang's handler."""
    plural = "s" if len(errors) != 1 else ""
    exc_str = f"{len(errors)} validation error{plural}:\n" + "".join(f"  {e}\n" for e in errors)
    errors_str = str(errors)
    message = f"{exc_str} {errors_str}" if errors_str and errors_str != exc_str else exc_str
    return HttpError(
        400,
        {"object": "error", "message": message, "type": "Bad Request", "param": None, "code": 400},
    )


def error_response(message: str, status: int = 400) -> Response:
    return json_response({"error": {"message": message}}, status=status)


def _decode_json(raw: bytes) -> Any | HttpError:
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        pos = getattr(exc, "pos", 0)
        return validation_error(
            [
                {
                    "type": "json_invalid",
                    "loc": ("body", pos),
                    "msg": "JSON decode error",
                    "input": {},
                    "ctx": {"error": getattr(exc, "msg", str(exc))},
                }
            ]
        )


def _body_object(raw: bytes) -> dict[str, Any] | HttpError:
    if not raw.strip():
        return validation_error(
            [{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}]
        )
    data = _decode_json(raw)
    if isinstance(data, HttpError):
        return data
    if not isinstance(data, dict):
        return validation_error(
            [
                {
                    "type": "model_attributes_type",
                    "loc": ("body",),
                    "msg": "Input should be a valid dictionary or object to extract fields from",
                    "input": data,
                }
            ]
        )
    return data


# --------------------------------------------------------------------- /set_internal_state


def _lax_number(
    value: Any, loc: tuple[Any, ...]
) -> tuple[int | float | None, list[dict[str, Any]]]:
    """pydantic lax ``Union[int, float]``: bools and numeric strings coerce; null does not."""
    if isinstance(value, bool):
        return int(value), []
    if isinstance(value, int | float):
        return value, []
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text), []
        except ValueError:
            pass
        try:
            return float(text), []
        except ValueError:
            pass
        return None, _union_errors(
            value,
            loc,
            "parsing",
            ", unable to parse string as an integer",
            ", unable to parse string as a number",
        )
    return None, _union_errors(value, loc, "type")


def _union_errors(
    value: Any, loc: tuple[Any, ...], problem: str, int_detail: str = "", float_detail: str = ""
) -> list[dict[str, Any]]:
    """pydantic's errors for a value neither member of ``Union[int, float]`` takes: one per
    member, `problem` naming why (``int_type``/``int_parsing``, ...)."""
    return [
        {
            "type": f"int_{problem}",
            "loc": (*loc, "int"),
            "msg": f"Input should be a valid integer{int_detail}",
            "input": value,
        },
        {
            "type": f"float_{problem}",
            "loc": (*loc, "float"),
            "msg": f"Input should be a valid number{float_detail}",
            "input": value,
        },
    ]


def parse_set_internal_state(
    raw: bytes, *, accept_null_pin: bool = False
) -> dict[str, int | float | None] | HttpError:
    body = _body_object(raw)
    if isinstance(body, HttpError):
        return body
    if "server_args" not in body:
        return validation_error(
            [
                {
                    "type": "missing",
                    "loc": ("body", "server_args"),
                    "msg": "Field required",
                    "input": body,
                }
            ]
        )
    args = body["server_args"]
    if not isinstance(args, dict):
        return validation_error(
            [
                {
                    "type": "dict_type",
                    "loc": ("body", "server_args"),
                    "msg": "Input should be a valid dictionary",
                    "input": args,
                }
            ]
        )
    out: dict[str, int | float | None] = {}
    errors: list[dict[str, Any]] = []
    for key, value in args.items():
        if value is None and accept_null_pin and key == "dspark_force_budget_frac":
            out[key] = None
            continue
        number, errs = _lax_number(value, ("body", "server_args", key))
        errors.extend(errs)
        out[key] = number
    if errors:
        return validation_error(errors)
    return out


def check_flush_timeout(raw: str) -> HttpError | None:
    """``timeout: float = Query(0.0, ge=0.0)`` of /flush_cache."""
    try:
        value = float(raw)
    except ValueError:
        return validation_error(
            [
                {
                    "type": "float_parsing",
                    "loc": ("query", "timeout"),
                    "msg": "Input should be a valid number, unable to parse string as a number",
                    "input": raw,
                }
            ]
        )
    if not value >= 0:
        return validation_error(
            [
                {
                    "type": "greater_than_equal",
                    "loc": ("query", "timeout"),
                    "msg": "Input should be greater than or equal to 0",
                    "input": raw,
                    "ctx": {"ge": 0.0},
                }
            ]
        )
    return None


# --------------------------------------------------------------------- /abort_request


def parse_abort(raw: bytes) -> tuple[str | None, bool] | HttpError:
    body = _body_object(raw)
    if isinstance(body, HttpError):
        return body
    rid = body.get("rid")
    abort_all = body.get("abort_all", False)
    errors = []
    if rid is not None and not isinstance(rid, str):
        errors.append(
            {
                "type": "string_type",
                "loc": ("body", "rid"),
                "msg": "Input should be a valid string",
                "input": rid,
            }
        )
    if not isinstance(abort_all, bool):
        if isinstance(abort_all, int) and abort_all in (0, 1):
            abort_all = bool(abort_all)
        elif isinstance(abort_all, str) and abort_all.lower() in ("true", "false", "1", "0"):
            abort_all = abort_all.lower() in ("true", "1")
        else:
            errors.append(
                {
                    "type": "bool_parsing",
                    "loc": ("body", "abort_all"),
                    "msg": "Input should be a valid boolean, unable to interpret input",
                    "input": abort_all,
                }
            )
    if errors:
        return validation_error(errors)
    return rid, bool(abort_all)


# --------------------------------------------------------------------- /generate


@dataclass(frozen=True)
class Prompt:
    rid: str | None
    input_len: int
    max_new_tokens: int


@dataclass(frozen=True)
class GenerateCall:
    prompts: list[Prompt]
    batch: bool
    stream: bool


def _type_error(loc: tuple[Any, ...], kind: str, msg: str, value: Any) -> dict[str, Any]:
    return {"type": kind, "loc": ("body", *loc), "msg": msg, "input": value}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _prompt_lengths(body: dict[str, Any], errors: list[dict[str, Any]]) -> tuple[list[int], bool]:
    """Each prompt's length in tokens (from input_ids, else from text), and whether the
    request is a batch; type errors are added to `errors`."""
    input_ids = body.get("input_ids")
    text = body.get("text")
    lengths: list[int] = []
    batch = False
    if input_ids is not None:
        if (
            isinstance(input_ids, list)
            and input_ids
            and all(isinstance(x, list) for x in input_ids)
        ):
            batch = True
            for i, ids in enumerate(input_ids):
                if not all(_is_int(t) for t in ids):
                    errors.append(
                        _type_error(
                            ("input_ids", i), "int_type", "Input should be a valid integer", ids
                        )
                    )
                lengths.append(len(ids))
        elif isinstance(input_ids, list) and all(_is_int(t) for t in input_ids):
            lengths.append(len(input_ids))
        else:
            errors.append(
                _type_error(
                    ("input_ids",),
                    "list_type",
                    "Input should be a valid list of token ids or a list of such lists",
                    input_ids,
                )
            )
    elif text is not None:
        if isinstance(text, str):
            lengths.append(max(1, len(text.encode()) // 4))
        elif isinstance(text, list) and all(isinstance(t, str) for t in text):
            batch = True
            lengths.extend(max(1, len(t.encode()) // 4) for t in text)
        else:
            errors.append(
                _type_error(("text",), "string_type", "Input should be a valid string", text)
            )
    return lengths, batch


def _prompt(i: int, rid: str | None, length: int, params: Any) -> Prompt | HttpError:
    """One prompt of the request, or why SGLang refuses it."""
    if not isinstance(params, dict):
        return HttpError(400, {"error": {"message": "sampling_params must be a dict"}})
    max_new = params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    if max_new is None:
        max_new = DEFAULT_MAX_NEW_TOKENS
    if not _is_int(max_new):
        return HttpError(
            400, {"error": {"message": f"max_new_tokens must be an integer, got {max_new!r}"}}
        )
    if max_new < 0:
        return HttpError(
            400, {"error": {"message": f"max_new_tokens must be at least 0, got {max_new}."}}
        )
    temperature = params.get("temperature", 1.0)
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or temperature < 0
        or math.isnan(temperature)
    ):
        return HttpError(
            400,
            {"error": {"message": f"temperature must be non-negative, got {temperature}."}},
        )
    if length == 0:
        return HttpError(400, {"error": {"message": f"The input_ids of request {i} is empty."}})
    return Prompt(rid=rid, input_len=length, max_new_tokens=int(max_new))


def parse_generate(raw: bytes) -> GenerateCall | HttpError:
    body = _body_object(raw)
    if isinstance(body, HttpError):
        return body
    errors: list[dict[str, Any]] = []
    lengths, batch = _prompt_lengths(body, errors)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        errors.append(
            _type_error(("stream",), "bool_type", "Input should be a valid boolean", stream)
        )
    rid = body.get("rid")
    if rid is not None and not (
        isinstance(rid, str) or (isinstance(rid, list) and all(isinstance(r, str) for r in rid))
    ):
        errors.append(_type_error(("rid",), "string_type", "Input should be a valid string", rid))
    sampling = body.get("sampling_params")
    if sampling is not None and not isinstance(sampling, dict | list):
        errors.append(
            _type_error(
                ("sampling_params",), "dict_type", "Input should be a valid dictionary", sampling
            )
        )
    if errors:
        return validation_error(errors)
    if not lengths:
        return HttpError(
            400,
            {"error": {"message": "Either text, input_ids or input_embeds should be provided."}},
        )
    n = len(lengths)
    if isinstance(sampling, list):
        if len(sampling) != n:
            return HttpError(
                400,
                {"error": {"message": "The length of sampling_params must match the batch size."}},
            )
        params_list = sampling
    else:
        params_list = [sampling or {}] * n
    if isinstance(rid, list):
        if len(rid) != n:
            return HttpError(
                400, {"error": {"message": "The rid should have the same length as the batch."}}
            )
        rids: list[str | None] = list(rid)
    elif isinstance(rid, str):
        rids = [rid] if n == 1 else [f"{rid}_{i}" for i in range(n)]
    else:
        rids = [None] * n
    prompts = []
    for i, (length, params) in enumerate(zip(lengths, params_list, strict=True)):
        prompt = _prompt(i, rids[i], length, params)
        if isinstance(prompt, HttpError):
            return prompt
        prompts.append(prompt)
    return GenerateCall(prompts=prompts, batch=batch, stream=bool(stream))


def generate_output(req: Request, latency_s: float, gamma: int) -> dict[str, Any]:
    completion = len(req.output_ids)
    return {
        "text": "",
        "output_ids": list(req.output_ids),
        "meta_info": {
            "id": req.rid,
            "finish_reason": req.finish_reason,
            "prompt_tokens": req.input_ids_len,
            "weight_version": "default",
            "total_retractions": 0,
            "completion_tokens": completion,
            "cached_tokens": 0,
            "spec_verify_ct": req.verify_steps,
            "spec_accept_length": (
                (completion - 1) / req.verify_steps if req.verify_steps else 0.0
            ),
            "e2e_latency": round(latency_s, 6),
        },
    }
