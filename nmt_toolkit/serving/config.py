"""nmt-serve's options: where it listens, how it batches, what it refuses. CLI flags come from these fields."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from nmt_toolkit.config import option
from nmt_toolkit.errors import UsageError


@dataclass
class ServeConfig:
    """The HTTP server and its dynamic batcher (the model's own options are the data and generation groups)."""

    host: str = option("127.0.0.1", "address to listen on (0.0.0.0: every interface; put a reverse proxy with TLS "
                                    "in front before you do)")
    port: int = option(8000, "TCP port to listen on (0: any free port, printed when the server is ready)",
                       low=0, high=65535)
    batching: bool = option(True, "dynamic batching: decode the sentences of requests that arrive together in one "
                                  "batch (--no-batching: one request at a time, each its own batch)")
    max_batch_tokens: int = option(6000, "a decode batch holds at most this many source tokens, padding included "
                                         "(a longer sentence still goes alone)", low=1, high=10_000_000)
    max_wait_ms: float = option(20.0, "milliseconds a batch waits for more requests after the oldest of its "
                                      "requests arrived or the last batch finished, whichever is later",
                                low=0, high=10_000)
    decode_workers: Optional[int] = option(None, "batches decoded at once on the CPU, each on threads // N threads "
                                                 "(CTranslate2: a replica of the model each) [default: one per "
                                                 "thread, at most 4; 1 on a GPU and with --sampling]",
                                           metavar="N", low=1, high=64)
    request_timeout: float = option(60.0, "seconds a request may wait for its translation; then 503", low=0,
                                    low_open=True, high=86_400)
    client_timeout: float = option(30.0, "seconds a client may take to send a whole request (its headers and body, "
                                         "from when the server waits for it); a slower one's connection is closed",
                                   low=0, low_open=True, high=3600)
    max_connections: int = option(500, "most client connections open at once; one more is closed at once (keep "
                                       "it below the process' open-file limit, ulimit -n)", low=1, high=1_000_000)
    max_request_bytes: int = option(1_000_000, "largest request body (413 above)", low=1, high=1_000_000_000)
    max_chars: int = option(20_000, "most characters of text in one request (400 above; LibreTranslate's "
                                    "--char-limit)", low=1, high=100_000_000)
    batch_limit: int = option(0, "most texts in one request: the q list of /translate, the sentences of "
                                 "/v1/translate (400 above; 0: no limit but --max-sentences)", low=0,
                              high=1_000_000)
    req_limit: int = option(0, "requests per minute of one client (its API key when keys are in use, else its "
                               "IP address) to /translate, /detect, /suggest, /translate_file and /v1/translate; 429 above, with Retry-After "
                               "(0: no limit; a key's own number in the --api-keys file wins)", low=0,
                            high=1_000_000)
    cache_size: int = option(10_000, "sentences whose translations are kept for the next request that asks the "
                                     "same (same direction and search options); 0: no cache", low=0,
                             high=100_000_000)
    max_sentences: int = option(500, "most sentences in one request, after splitting texts into lines and "
                                     "sentences (400 above)", low=1, high=1_000_000)
    max_nbest: int = option(10, "largest nbest (and LibreTranslate alternatives + 1) a request may ask for",
                            low=1, high=100)
    max_beam: int = option(16, "largest beam a request may ask for", low=1, high=1000)
    also: list[str] = option([], "serve this model folder too, for its own language pair (repeat for more pairs)",
                             multiple=True, metavar="FOLDER")
    disable_files_translation: bool = option(False, "refuse /translate_file (403) and say so in /frontend/settings "
                                                    "(LibreTranslate's --disable-files-translation)")
    max_file_bytes: int = option(10_000_000, "largest document /translate_file takes (413 above); its text is held "
                                             "to --max-chars too", low=1, high=1_000_000_000)
    files_expiry: float = option(600.0, "seconds a translated document waits at its /download_file URL",
                                 low=0, low_open=True, high=86_400 * 7)
    max_stored_files: int = option(100, "most translated documents kept for download at once (the oldest goes "
                                        "first)", low=1, high=1_000_000)
    api_keys: Optional[str] = option(None, "file of API keys, one per line ('#' comments), each optionally followed "
                                           "by its requests per minute (else --req-limit's; 0: none): requests to "
                                           "/translate, /detect, /suggest, /translate_file and /v1/translate must carry one (api_key field or "
                                           "Authorization: Bearer), else 401", metavar="FILE")
    suggestions: Optional[str] = option(None, "store what clients send to /suggest (a text and the translation "
                                              "they suggest for it) in this SQLite database, created if missing, "
                                              "else appended to; nmt-preprocess --trainpref sqlite:DB reads it "
                                              "(without it, /suggest is a 403)", metavar="DB", output="file")

    def validate(self) -> None:
        if self.max_nbest > self.max_beam:
            raise UsageError(f"--max-nbest {self.max_nbest} is larger than --max-beam {self.max_beam}")


def read_api_keys(path: str) -> dict[str, Optional[int]]:
    """The keys of ``path``, each with its own requests per minute or None (the server's --req-limit): one key
    a line, optionally followed by whitespace and that number (0: no limit); blank lines and ``#`` comments
    skipped. A bad line, or no key at all, is an error naming the file and the line."""
    from nmt_toolkit.errors import DataError

    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"--api-keys {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    keys: dict[str, Optional[int]] = {}
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) > 2 or (len(fields) == 2 and not (fields[1].isascii() and fields[1].isdigit())):
            raise DataError(f"--api-keys {path}: line {number}: expected a key, optionally followed by its requests "
                            f"per minute (a whole number, 0: no limit)")
        if fields[0] in keys:
            raise DataError(f"--api-keys {path}: line {number}: the key is listed twice")
        keys[fields[0]] = int(fields[1]) if len(fields) == 2 else None
    if not keys:
        raise DataError(f"--api-keys {path}: no key in it (one key a line)")
    return keys
