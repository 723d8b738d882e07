"""An agent that floods Tether with spans through its own rollout token, every way an agent can send them
(the store API and OTLP, in batches of 50 spans of 20 KB), and keeps making model calls between batches
and after it is refused. It prints what each way answered, as JSON, and exits 0 whatever happened."""

import json
import os
import urllib.error
import urllib.request

TOKEN = os.environ["OPENAI_API_KEY"]
ROLLOUT = os.environ["TETHER_ROLLOUT_ID"]
BATCHES = 40  # 2,000 spans and 40 MB each way, if nothing stopped it
PER_BATCH = 50
FILLER = "x" * 20_000


def post(url: str, body: dict) -> int:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as exc:
        exc.read()
        return exc.code


def store_batch(batch: int) -> dict:
    spans = [
        {"rollout_id": ROLLOUT, "name": f"flood {batch}.{i}", "start_time": 1.0, "attributes": {"x": FILLER}}
        for i in range(PER_BATCH)
    ]
    return {"spans": spans}


def otlp_batch(batch: int) -> dict:
    spans = [
        {
            "traceId": f"{batch + 1:032x}",
            "spanId": f"{i + 1:016x}",
            "name": f"otlp flood {batch}.{i}",
            "startTimeUnixNano": "1700000000000000000",
            "attributes": [{"key": "x", "value": {"stringValue": FILLER}}],
        }
        for i in range(PER_BATCH)
    ]
    return {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}


def call(text: str) -> int:
    body = {"model": "policy", "messages": [{"role": "user", "content": text}], "max_tokens": 4}
    return post(os.environ["OPENAI_BASE_URL"] + "/chat/completions", body)


seen: dict[str, list[int]] = {"store": [], "otlp": [], "calls": []}
for batch in range(BATCHES):
    seen["store"].append(post(os.environ["TETHER_SERVER"] + "/store/spans", store_batch(batch)))
    seen["otlp"].append(post(os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"], otlp_batch(batch)))
    if batch % 10 == 0:
        seen["calls"].append(call(f"call during the flood {batch}"))
seen["calls"].append(call("call after the flood"))
print(json.dumps(seen))
