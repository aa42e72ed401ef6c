"""The server's Prometheus metrics, in a registry of its own (nothing is added to prometheus_client's
process-wide default registry, so two servers in one process, or a test, never share counts)."""
from __future__ import annotations

from nmt_toolkit.serving.batcher import BatchObserver

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
TOKEN_BUCKETS = (16, 64, 256, 1024, 2048, 4096, 8192, 16384, 65536)


class ServerMetrics(BatchObserver):
    """Requests (by endpoint and status), their latency, batch sizes, tokens decoded, the queue."""

    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = r = CollectorRegistry(auto_describe=True)
        self.requests = Counter("nmt_serve_requests", "HTTP requests answered", ["endpoint", "status"], registry=r)
        self.errors = Counter("nmt_serve_errors", "requests answered with a 4xx or 5xx status",
                              ["endpoint", "status"], registry=r)
        self.latency = Histogram("nmt_serve_request_seconds", "time from receiving a request to its answer",
                                 ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.batch_sentences = Histogram("nmt_serve_batch_sentences", "sentences per decoded batch",
                                         buckets=SIZE_BUCKETS, registry=r)
        self.batch_tokens = Histogram("nmt_serve_batch_tokens", "source tokens per decoded batch, padding included",
                                      buckets=TOKEN_BUCKETS, registry=r)
        self.sentences = Counter("nmt_serve_sentences", "sentences decoded", registry=r)
        self.source_tokens = Counter("nmt_serve_source_tokens", "source tokens decoded (EOS included)", registry=r)
        self.target_tokens = Counter("nmt_serve_target_tokens", "target tokens produced (best hypotheses, EOS "
                                     "included); rate() of it is the tokens/s", registry=r)
        self.decode_seconds = Counter("nmt_serve_decode_seconds", "time spent decoding batches", registry=r)
        self.tokens_per_second = Gauge("nmt_serve_last_batch_target_tokens_per_second",
                                       "target tokens per second of the last decoded batch", registry=r)
        self.dropped_sentences = Counter("nmt_serve_dropped_sentences", "sentences not decoded (or whose search "
                                         "was stopped) because their request was gone (client disconnected or "
                                         "timed out)", registry=r)
        self.queue = Gauge("nmt_serve_queue_sentences", "sentences waiting for a batch", registry=r)
        self.in_batch = Gauge("nmt_serve_decoding_sentences", "sentences in the batches decoding now", registry=r)
        self.in_flight = Gauge("nmt_serve_requests_in_flight", "requests being answered", registry=r)

    def dropped(self, sentences: int) -> None:
        self.dropped_sentences.inc(sentences)

    def decoding(self, sentences: int) -> None:
        self.in_batch.inc(sentences)

    def failed(self, sentences: int) -> None:
        self.in_batch.dec(sentences)

    def stopped(self, sentences: int) -> None:
        self.in_batch.dec(sentences)
        self.dropped_sentences.inc(sentences)

    def decoded(self, sentences: int, source_tokens: int, padded_tokens: int, results: list, seconds: float) -> None:
        produced = sum(len(hyps[0].positional_scores) for hyps in results if hyps)
        self.in_batch.dec(sentences)
        self.batch_sentences.observe(sentences)
        self.batch_tokens.observe(padded_tokens)
        self.sentences.inc(sentences)
        self.source_tokens.inc(source_tokens)
        self.target_tokens.inc(produced)
        self.decode_seconds.inc(seconds)
        if seconds > 0:
            self.tokens_per_second.set(produced / seconds)

    def answered(self, endpoint: str, status: int, seconds: float) -> None:
        self.requests.labels(endpoint, str(status)).inc()
        if status >= 400:
            self.errors.labels(endpoint, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)

    def watch_cache(self, cache) -> None:
        """Expose ``cache``'s lookups (hits, misses, their rate) and size, read from it at each scrape."""
        self.registry.register(_CacheCollector(cache))

    def exposition(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class _CacheCollector:
    """The translation cache's counts as metrics: the cache keeps them, so a lookup costs no metrics call."""

    def __init__(self, cache):
        self.cache = cache

    def describe(self):
        return []  # collected only at a scrape: registering reads nothing

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        hits, misses = self.cache.hits, self.cache.misses
        yield CounterMetricFamily("nmt_serve_cache_hits", "sentences answered from the translation cache", hits)
        yield CounterMetricFamily("nmt_serve_cache_misses", "sentences looked up in the translation cache and "
                                  "not found (then decoded)", misses)
        yield GaugeMetricFamily("nmt_serve_cache_hit_ratio", "hits / (hits + misses) since the server started "
                                "(0 before any lookup)", hits / (hits + misses) if hits + misses else 0.0)
        yield GaugeMetricFamily("nmt_serve_cache_sentences", "sentences held in the translation cache",
                                len(self.cache))
