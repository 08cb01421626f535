"""The recovery loader: what a JMS server finds in its store when it
opens, rebuilt into the registry and the broker core.

In order: the boot counter (raised, so message ids stay unique), the
delivery records (each message they name comes back flagged redelivered,
its delivery count raised: JMS 2.0 §6.2.11), the quota resources, the
destinations, the durable subscriptions, and then every persistent message
of every queue and subscription, back into the pager with its delivery
count. Records left by a deletion that a crash interrupted (a
subscription of a deleted topic, messages of a deleted destination,
delivery records naming only deleted messages) are removed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from jmsstore._native import NativeBroker, NativePager
from jmsstore.broker.layout import ServerLayout, decode_json
from jmsstore.broker.limits import Quota, ServerLimits
from jmsstore.broker.registry import Registry, SubscriptionSpec, Target
from jmsstore.broker.settings import DestinationSettings
from jmsstore.jms.destination import Queue, Topic
from jmsstore.jms.message import peek_header
from jmsstore.store import FileStore

__all__ = ["RecoveryLoader"]

log = logging.getLogger("jmsstore.broker")

Progress = Callable[[str, int, int], None]


class RecoveryLoader:
    """Loads one server's state from its store (see the module notes)."""

    def __init__(
        self,
        layout: ServerLayout,
        store: FileStore,
        pager: NativePager,
        native: NativeBroker,
        registry: Registry,
        limits: ServerLimits,
        progress: Progress | None = None,
    ) -> None:
        self.layout = layout
        self._store = store
        self._pager = pager
        self._native = native
        self._registry = registry
        self._limits = limits
        self._progress = progress

    def load(self) -> dict[str, Any]:
        """Loads everything; returns what was found (``JMSServer.recovered``)."""
        layout, store = self.layout, self._store
        boot = self._boot()
        counts_list, stale, malformed = self._native.recover_deliveries()
        counts = dict(counts_list)
        for handle in malformed:
            log.warning("delivery record %d of %s is malformed; it is kept and not used", handle, layout.delivered)
        known = {layout.server, layout.delivered, layout.quotas, layout.destinations, layout.subscriptions}
        for handle, body in store.scan(layout.quotas):
            quota = Quota(**decode_json(body))
            self._limits.define_quota(quota, handle, [])
        for handle, body in store.scan(layout.destinations):
            data = decode_json(body)
            settings = DestinationSettings.from_json(data.get("settings", {}))
            if data["kind"] == "queue":
                state = self._registry.add_queue(Queue(data["name"]), settings, handle)
                known.add(state.target.collection or "")
            else:
                self._registry.add_topic(Topic(data["name"]), settings, handle)
        for handle, body in store.scan(layout.subscriptions):
            spec = SubscriptionSpec.from_json(decode_json(body))
            topic = self._registry.topics.get(spec.topic)
            if topic is None:  # its topic's deletion was interrupted
                stale.append(handle)
                continue
            sub = self._registry.add_subscription(topic, spec, handle)
            known.add(sub.collection or "")
        targets = self._registry.targets()
        total = sum(store.count(t.collection) for t in targets if t.collection is not None)
        loaded = 0
        for target in targets:
            loaded = self._load_messages(target, counts, loaded, total)
        # Objects of destinations whose deletion was interrupted.
        for collection in store.collections():
            if (
                collection.startswith(layout.prefix)
                and collection not in known
                and not layout.is_quarantine(collection)
            ):
                stale.extend(store.handles(collection))
        if stale:
            with store.transaction() as txn:
                for handle in stale:
                    txn.delete(handle)
        return {
            "boot": boot,
            "queues": len(self._registry.queues),
            "topics": len(self._registry.topics),
            "durable_subscriptions": len(self._registry.durable) + len(self._registry.shared),
            "messages": sum(self._pager.count(t.pager_id) for t in targets),
            "in_doubt_deliveries": len(counts),
            "stale_records_removed": len(stale),
        }

    def _boot(self) -> int:
        """Raises the boot counter (message ids stay unique across restarts)."""
        store, layout = self._store, self.layout
        records = list(store.scan(layout.server))
        if records:
            handle, body = records[-1]
            boot = layout.read_boot(body) + 1
            store.update(handle, layout.boot_record(boot))
        else:
            boot = 1
            store.put(layout.server, layout.boot_record(boot))
        return boot

    def _load_messages(self, target: Target, counts: dict[int, int], loaded: int, total: int) -> int:
        """Puts a target's stored messages back into the pager, with their delivery counts."""
        assert target.collection is not None
        add = self._pager.add
        native = target.native
        for handle, body in self._store.scan(target.collection):
            ident, priority, timestamp, expiration, delivery_time, correlation_id, jms_type = peek_header(body)
            add(
                target.pager_id,
                body,
                len(body),
                ident,
                priority,
                timestamp,
                expiration,
                delivery_time,
                counts.get(handle, 0),
                correlation_id,
                jms_type,
                None,
                handle,
            )
            if delivery_time > timestamp:
                # A delayed message: waiting consumers must wake when it is due.
                native.delay_until(delivery_time)
            self._native.count_in(native, 1, len(body))
            loaded += 1
            if self._progress is not None and loaded % 10_000 == 0:
                self._progress("messages", loaded, total)
        return loaded
