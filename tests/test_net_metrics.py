"""The statistics as Prometheus text: the rendering, and ``jmsstore serve
--metrics`` scraped over HTTP while stomp.py sends."""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import stomp
from jmsstore.net.metrics import CONTENT_TYPE, render
from stomp_helpers import WAIT, Served

SAMPLE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*",?)*\})? -?[0-9.e+-]+$')


def test_render_names_each_number_by_its_place_with_labels() -> None:
    broker = {
        "name": "jms1",
        "sent": 3,
        "flow_control_armed": True,
        "paused": [],
        "store": {"fsyncs": 2},
        "queues": {'or"ders': {"messages_current": 1, "quota": None}},
        "durable_subscriptions": [{"client_id": "app", "name": "audit", "messages": 4}],
    }
    endpoints = {"127.0.0.1:61613": {"connections_open": 2, "frames_in": {"SEND": 5}}}
    text = render(broker, endpoints)
    lines = text.splitlines()
    assert 'jmsstore_sent{server="jms1"} 3' in lines
    assert 'jmsstore_flow_control_armed{server="jms1"} 1' in lines
    assert 'jmsstore_store_fsyncs{server="jms1"} 2' in lines
    assert 'jmsstore_queue_messages_current{server="jms1",queue="or\\"ders"} 1' in lines
    assert 'jmsstore_durable_subscription_messages{server="jms1",client_id="app",name="audit"} 4' in lines
    assert 'jmsstore_stomp_connections_open{server="jms1",endpoint="127.0.0.1:61613"} 2' in lines
    assert 'jmsstore_stomp_frames_in{server="jms1",endpoint="127.0.0.1:61613",command="SEND"} 5' in lines
    assert "# TYPE jmsstore_sent gauge" in lines
    assert all(line.startswith("# TYPE ") or SAMPLE.match(line) for line in lines), text


def scrape(url: str) -> tuple[str, str]:
    with urllib.request.urlopen(url, timeout=WAIT) as response:
        return response.headers["Content-Type"], response.read().decode("utf-8")


def test_jmsstore_serve_exposes_stomp_and_broker_statistics(tmp_path: Path) -> None:
    served = Served(tmp_path / "home", "--metrics", "127.0.0.1:0")
    try:
        line = served.lines.get(timeout=WAIT)
        assert line.startswith("jmsstore serve: metrics on http://127.0.0.1:"), line
        url = line.rsplit(" ", 1)[1]
        conn = stomp.Connection12([("127.0.0.1", served.port)], auto_decode=False, timeout=WAIT)
        conn.connect(wait=True)
        try:
            conn.send("/queue/scraped", b"x", persistent="true", receipt="r")
            wanted = 'jmsstore_queue_messages_current{server="jms1",queue="scraped"} 1'
            deadline = time.monotonic() + WAIT
            while True:  # until the send is in (stomp.py does not wait for its receipt)
                content_type, text = scrape(url)
                lines = text.splitlines()
                if wanted in lines:
                    break
                assert time.monotonic() < deadline, text
                time.sleep(0.05)
            assert content_type == CONTENT_TYPE
            endpoint = f'endpoint="127.0.0.1:{served.port}"'
            assert f'jmsstore_stomp_connections_open{{server="jms1",{endpoint}}} 1' in lines
            assert any(line.startswith("jmsstore_stomp_frames_in{") and 'command="SEND"' in line for line in lines)
            assert 'jmsstore_queue_messages_current{server="jms1",queue="scraped"} 1' in lines
            assert any(line.startswith('jmsstore_store_fsyncs{server="jms1"}') for line in lines)
        finally:
            conn.disconnect()
        with pytest.raises(urllib.error.HTTPError) as raised:
            scrape(url.replace("/metrics", "/other"))
        assert raised.value.code == 404
        raised.value.close()  # its response holds the socket
        assert served.terminate() == 0
    finally:
        served.kill()
