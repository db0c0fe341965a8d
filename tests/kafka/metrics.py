"""Scrapes a minibroker /metrics endpoint and parses it with the prometheus_client package's
OpenMetrics parser (a real Prometheus parser, not ours). Prints one JSON line: every sample as
[name, labels, value]. Exits non-zero if the exposition does not parse.

    python metrics.py URL
"""

import json
import sys
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def main():
    with urllib.request.urlopen(sys.argv[1], timeout=10) as response:
        content_type = response.headers.get("Content-Type", "")
        text = response.read().decode()
    samples = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.append([sample.name, sample.labels, sample.value])
    print(json.dumps({"ok": True, "content_type": content_type, "samples": samples}))


if __name__ == "__main__":
    main()
