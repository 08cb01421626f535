"""Generated message bodies: JSON-like, XML-like (compressible, like real
business messages: repeated keys/tags, varied values) and random bytes
(incompressible). Deterministic for a given seed, cut to the exact size."""

from __future__ import annotations

import json
import random

KINDS = ("json", "xml", "random")
SIZES = {"1KiB": 1024, "10KiB": 10 * 1024, "100KiB": 100 * 1024}

_WORDS = [
    *("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo"),
    *("lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor"),
    *("whiskey", "xray", "yankee", "zulu", "order", "invoice", "customer", "shipment", "warehouse", "pending"),
    *("shipped", "delivered", "cancelled", "priority", "standard", "express", "berlin", "paris", "london", "tokyo"),
]
_SKUS = [f"SKU-{i:05d}" for i in range(0, 50000, 7)]


def _item(rng: random.Random, i: int) -> dict[str, object]:
    return {
        "line": i,
        "sku": rng.choice(_SKUS),
        "description": " ".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 6))),
        "quantity": rng.randint(1, 500),
        "unitPrice": round(rng.uniform(0.5, 999.0), 2),
        "currency": rng.choice(("EUR", "USD", "GBP", "JPY")),
        "status": rng.choice(("pending", "shipped", "delivered", "cancelled")),
    }


def _order(rng: random.Random, n: int) -> dict[str, object]:
    return {
        "orderId": f"ORD-{rng.randrange(10**9):09d}",
        "customer": {
            "id": rng.randrange(10**7),
            "name": f"{rng.choice(_WORDS).title()} {rng.choice(_WORDS).title()}",
            "email": f"{rng.choice(_WORDS)}.{rng.choice(_WORDS)}@example.com",
            "city": rng.choice(_WORDS[-4:]),
        },
        "created": f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:"
        f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z",
        "priority": rng.choice(("standard", "express", "priority")),
        "items": [_item(rng, i) for i in range(n)],
    }


def json_body(size: int, seed: int = 1) -> bytes:
    rng = random.Random(seed)
    parts: list[bytes] = []
    total = 0
    while total < size:
        chunk = json.dumps(_order(rng, rng.randint(1, 8)), separators=(",", ":")).encode()
        parts.append(chunk)
        total += len(chunk) + 1
    return b"\n".join(parts)[:size]


def _xml_order(rng: random.Random, n: int) -> str:
    o = _order(rng, n)
    c = o["customer"]
    assert isinstance(c, dict)
    items = "".join(
        f'<item line="{it["line"]}"><sku>{it["sku"]}</sku><description>{it["description"]}</description>'
        f'<quantity>{it["quantity"]}</quantity><unitPrice currency="{it["currency"]}">{it["unitPrice"]}</unitPrice>'
        f"<status>{it['status']}</status></item>"
        for it in o["items"]  # type: ignore[attr-defined]
    )
    return (
        f'<order id="{o["orderId"]}" priority="{o["priority"]}"><created>{o["created"]}</created>'
        f'<customer id="{c["id"]}"><name>{c["name"]}</name><email>{c["email"]}</email><city>{c["city"]}</city>'
        f"</customer><items>{items}</items></order>"
    )


def xml_body(size: int, seed: int = 1) -> bytes:
    rng = random.Random(seed)
    parts = ['<?xml version="1.0" encoding="UTF-8"?><orders>']
    total = len(parts[0])
    while total < size:
        chunk = _xml_order(rng, rng.randint(1, 8))
        parts.append(chunk)
        total += len(chunk)
    return "".join(parts).encode()[:size]


def random_body(size: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(size)


def body(kind: str, size: int, seed: int = 1) -> bytes:
    if kind == "json":
        return json_body(size, seed)
    if kind == "xml":
        return xml_body(size, seed)
    if kind == "random":
        return random_body(size, seed)
    raise ValueError(f"unknown body kind {kind!r}")
