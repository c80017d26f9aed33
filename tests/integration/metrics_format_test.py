"""GET /metrics on a T=1 cluster parses as Prometheus text (prometheus_client's parser), holds every
family coordinator/metrics.h lists, and counts the requests sent through /v1/completions; under
--metrics-names vllm, the series the Gateway API Inference Extension's endpoint picker reads.

    metrics_format_test.py --bin-dir BUILD/bin --model MODEL.gguf [unittest args]
"""

import json
import math
import os
import re
import unittest
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tpserve_cluster import run_tests, start_class_cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Family names as the parser gives them: counters without their `_total` suffix.
FAMILIES = {
    "tpserve:time_to_first_token_seconds": "histogram",
    "tpserve:inter_token_latency_seconds": "histogram",
    "tpserve:e2e_request_latency_seconds": "histogram",
    "tpserve:request_queue_time_seconds": "histogram",
    "tpserve:num_requests_running": "gauge",
    "tpserve:num_requests_waiting": "gauge",
    "tpserve:kv_cache_usage_perc": "gauge",
    "tpserve:prompt_tokens": "counter",
    "tpserve:generation_tokens": "counter",
    "tpserve:prefix_cache_queries": "counter",
    "tpserve:prefix_cache_hits": "counter",
    "tpserve:num_preemptions": "counter",
    "tpserve:request_success": "counter",
    "tpserve:auth_failures": "counter",
    "tpserve:cache_config_info": "gauge",
    "tpserve:cluster_degraded": "gauge",
}
PROMPTS = ["The capital of France is", "Count from one to ten: one, two,",
           "The capital of France is"]
MAX_TOKENS = 8


def http(url, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return response.headers.get("Content-Type", ""), response.read().decode()


class Scrape:
    """/metrics of the class's cluster, checked and parsed."""

    def scrape(self):
        """{family name: family}, after checking the parts every family must have."""
        content_type, text = http(self.cluster.http_url + "/metrics")
        self.assertTrue(content_type.startswith("text/plain"), content_type)
        families = {f.name: f for f in text_string_to_metric_families(text)}
        for family in families.values():
            self.assertTrue(family.documentation, f"{family.name} has no # HELP")
            for sample in family.samples:
                self.assertIn("model_name", sample.labels, sample)
            if family.type == "histogram":
                self.check_histogram(family)
        return families

    def check_histogram(self, family):
        buckets = [(float(s.labels["le"]), s.value) for s in family.samples
                   if s.name.endswith("_bucket")]
        count = [s.value for s in family.samples if s.name.endswith("_count")]
        self.assertEqual(len(count), 1, family.name)
        self.assertEqual(buckets, sorted(buckets), f"{family.name}: buckets not cumulative")
        self.assertEqual(buckets[-1], (math.inf, count[0]), family.name)

    @staticmethod
    def value(families, name, suffix):
        """The sum over labels; 0 for a family not shown yet (a labelled one before its first
        sample)."""
        family = families.get(name)
        return 0 if family is None else sum(
            s.value for s in family.samples if s.name == name + suffix)


class MetricsFormatTest(Scrape, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = start_class_cluster(cls, tp=1)

    def test_dashboard_and_alerts_name_only_exported_series(self):
        """Every series the chart's Grafana dashboard and PrometheusRule query is one /metrics
        exports (a sample name: counters with _total, histograms with _bucket)."""
        chart = os.path.join(REPO, "helm", "tpserve")
        with open(os.path.join(chart, "dashboards", "tpserve.json")) as f:
            dashboard = json.load(f)
        queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
        queries += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
        with open(os.path.join(chart, "templates", "prometheusrule.yaml")) as f:
            queries += [line.split("expr:", 1)[1] for line in f if "expr:" in line]
        samples = {s.name for family in self.scrape().values() for s in family.samples}
        named = {n for q in queries for n in re.findall(r"tpserve:[a-z0-9_]+", q)}
        self.assertGreater(len(named), 15)
        for name in sorted(named):
            with self.subTest(name):
                self.assertIn(name, samples)

    def test_families_and_counts(self):
        before = self.scrape()
        print(f"/metrics before any request: {sorted(before)}")

        model = json.loads(http(self.cluster.http_url + "/v1/models")[1])["data"][0]["id"]
        prompt_tokens = completion_tokens = 0
        for i, prompt in enumerate(PROMPTS):
            body = {"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS,
                    "temperature": 0, "stream": i == 1}
            if i == 1:
                body["stream_options"] = {"include_usage": True}
            _, text = http(self.cluster.http_url + "/v1/completions", body)
            if i == 1:
                events = [line[len("data: "):] for line in text.splitlines()
                          if line.startswith("data: ") and line != "data: [DONE]"]
                usage = json.loads(events[-1])["usage"]
            else:
                usage = json.loads(text)["usage"]
            prompt_tokens += usage["prompt_tokens"]
            completion_tokens += usage["completion_tokens"]

        after = self.scrape()
        for name, kind in FAMILIES.items():
            with self.subTest(name):
                self.assertIn(name, after)
                self.assertEqual(after[name].type, kind)
        delta = {name: self.value(after, name, suffix) - self.value(before, name, suffix)
                 for name, suffix in [
                     ("tpserve:time_to_first_token_seconds", "_count"),
                     ("tpserve:inter_token_latency_seconds", "_count"),
                     ("tpserve:e2e_request_latency_seconds", "_count"),
                     ("tpserve:request_queue_time_seconds", "_count"),
                     ("tpserve:prompt_tokens", "_total"),
                     ("tpserve:generation_tokens", "_total"),
                     ("tpserve:prefix_cache_queries", "_total"),
                     ("tpserve:prefix_cache_hits", "_total"),
                     ("tpserve:request_success", "_total")]}
        print(f"after {len(PROMPTS)} requests ({prompt_tokens} prompt, {completion_tokens} "
              f"completion tokens by usage): {delta}")
        n = len(PROMPTS)
        self.assertEqual(delta["tpserve:time_to_first_token_seconds"], n)
        self.assertEqual(delta["tpserve:e2e_request_latency_seconds"], n)
        self.assertEqual(delta["tpserve:request_queue_time_seconds"], n)
        self.assertEqual(delta["tpserve:request_success"], n)
        # At most one gap between consecutive tokens of a request (fewer when a step streams
        # several tokens of a request at once).
        self.assertGreater(delta["tpserve:inter_token_latency_seconds"], 0)
        self.assertLessEqual(delta["tpserve:inter_token_latency_seconds"], completion_tokens - n)
        self.assertEqual(delta["tpserve:prompt_tokens"], prompt_tokens)
        self.assertEqual(delta["tpserve:generation_tokens"], completion_tokens)
        self.assertGreater(delta["tpserve:prefix_cache_queries"], 0)
        self.assertEqual(self.value(after, "tpserve:num_requests_running", ""), 0)


# What the Gateway API Inference Extension's endpoint picker reads from a vLLM server (its model
# server protocol: queue, running batch, KV cache use, and the block size for prefix-aware routing).
ENDPOINT_PICKER_FAMILIES = {
    "vllm:num_requests_waiting": "gauge",
    "vllm:num_requests_running": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:cache_config_info": "gauge",
}


class VllmNamesTest(Scrape, unittest.TestCase):
    """The same cluster under --metrics-names vllm: the endpoint picker's series under vLLM's
    names, and counters that count under them."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = start_class_cluster(cls, tp=1, extra_args=["--metrics-names", "vllm"])

    def test_families_and_counts(self):
        families = self.scrape()
        for name, kind in ENDPOINT_PICKER_FAMILIES.items():
            with self.subTest(name):
                self.assertIn(name, families)
                self.assertEqual(families[name].type, kind)
        self.assertNotIn("tpserve:num_requests_waiting", families, "one name per series")
        self.assertIn("tpserve:recoveries", families, "tpserve's own series keep their names")
        (info,) = families["vllm:cache_config_info"].samples
        self.assertEqual(info.labels["block_size"], "16")
        self.assertGreater(int(info.labels["num_gpu_blocks"]), 0)
        self.assertTrue(0 <= self.value(families, "vllm:kv_cache_usage_perc", "") <= 1)

        model = json.loads(http(self.cluster.http_url + "/v1/models")[1])["data"][0]["id"]
        _, text = http(self.cluster.http_url + "/v1/completions",
                       {"model": model, "prompt": PROMPTS[0], "max_tokens": MAX_TOKENS,
                        "temperature": 0})
        usage = json.loads(text)["usage"]
        after = self.scrape()
        self.assertEqual(self.value(after, "vllm:request_success", "_total"), 1)
        self.assertEqual(self.value(after, "vllm:generation_tokens", "_total"),
                         usage["completion_tokens"])
        self.assertEqual(self.value(after, "vllm:num_requests_waiting", ""), 0)


if __name__ == "__main__":
    run_tests()
