"""Scrapes a minibroker /metrics endpoint and parses it with the prometheus_client package's
OpenMetrics parser (a real Prometheus parser, not ours). Prints one JSON line: every sample as
[name, labels, value]. Exits non-zero if the exposition does not parse.

    python metrics.py [--ca FILE] [--token TOKEN] [--expect-status N] URL

--ca trusts that CA for an https URL (and checks the host name); --token sends it as
`Authorization: Bearer`; --expect-status N expects that HTTP status instead of a scrape.
"""

import json
import ssl
import sys
import urllib.error
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def option(argv, flag):
    if flag not in argv:
        return None
    at = argv.index(flag)
    value = argv[at + 1]
    del argv[at:at + 2]
    return value


def main():
    argv = list(sys.argv)
    ca, token, expected = option(argv, "--ca"), option(argv, "--token"), option(argv, "--expect-status")
    request = urllib.request.Request(argv[1])
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    context = ssl.create_default_context(cafile=ca) if ca else None
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            status = response.status
            content_type = response.headers.get("Content-Type", "")
            text = response.read().decode()
    except urllib.error.HTTPError as error:
        status, content_type, text = error.code, "", ""
    if expected is not None:
        print(json.dumps({"ok": status == int(expected), "status": status}))
        sys.exit(0 if status == int(expected) else 1)
    samples = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.append([sample.name, sample.labels, sample.value])
    print(json.dumps({"ok": True, "content_type": content_type, "samples": samples}))


if __name__ == "__main__":
    main()
