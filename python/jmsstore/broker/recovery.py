"""The recovery loader: what a JMS server finds in its store when it
opens, rebuilt into the registry and the broker core.

In order: the boot counter (raised, so message ids stay unique), the
delivery records (each message they name comes back flagged redelivered,
its delivery count raised: JMS 2.0 §6.2.11), the quota resources, the
destinations, the durable subscriptions, and then every persistent message
of every queue and subscription, loaded by the broker core with its
delivery count (``NativeBroker.load``); a message whose delivery count is
past its destination's redelivery limit (its consumer's process died with
it, again and again) moves to the error destination instead, or is
dropped without one, as after a rollback. Records left by a deletion that a
crash interrupted (a subscription of a deleted topic, messages of a deleted
destination, delivery records naming only deleted messages) are removed.

Records recovery cannot use are never deleted, never loaded, and do not
stop the server from opening: a message a consumer could not be handed, a
delivery record that is not whole entries, a JSON record that is not what
it should be, a destination record whose settings are invalid (with the
messages of its queue or the subscriptions of its topic), a subscription
record (with its messages). They are moved to ``quarantine/<collection>``
(see :mod:`~jmsstore.broker.layout`) in store transactions (copy, then
delete the original), with a warning in the log naming the record, and
counted in the statistics (``malformed_records``, ``quarantined_records``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from jmsstore._native import HeaderIndex, NativeBroker, NativePager
from jmsstore.broker.layout import BOOT_SHIFT, ServerLayout, decode_json
from jmsstore.broker.limits import Quota, ServerLimits
from jmsstore.broker.registry import Registry, SubscriptionSpec
from jmsstore.broker.settings import DestinationSettings
from jmsstore.errors import InvalidArgumentError, JmsStoreError
from jmsstore.jms.destination import Queue, Topic, check_name
from jmsstore.selector import Selector
from jmsstore.store import FileStore

__all__ = [
    "MalformedRecord",
    "RecoveryLoader",
    "read_boot",
    "read_destination",
    "read_quota",
    "read_subscription",
]

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]


class MalformedRecord(Exception):
    """A stored record recovery cannot use; the message says why. ``owner``:
    the destination (kind, name) a destination record names, when readable.
    (The read-only view of ``jmsstore stats`` applies the same checks.)"""

    def __init__(self, reason: str, owner: tuple[str, str] | None = None) -> None:
        super().__init__(reason)
        self.owner = owner


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        return decode_json(body)
    except ValueError as e:  # not UTF-8, not JSON, or not an object
        raise MalformedRecord(f"not a JSON object ({e})") from None


def read_destination(body: bytes) -> tuple[str, str, DestinationSettings]:
    """A destination record's kind, name and settings, checked as ``create_queue`` checks them;
    ``MalformedRecord`` if they are not what the broker writes (so are the others)."""
    try:
        kind, name, settings = ServerLayout.read_destination(body)
        check_name(kind, name)
    except (ValueError, InvalidArgumentError) as e:
        raise MalformedRecord(str(e)) from None
    try:
        if not isinstance(settings, dict):
            raise TypeError(f"settings are a JSON object, not a {type(settings).__name__}")
        return kind, name, DestinationSettings.from_json(settings)
    except (TypeError, ValueError, InvalidArgumentError) as e:
        raise MalformedRecord(f"invalid settings: {e}", (kind, name)) from None


def read_boot(body: bytes) -> int:
    """The boot counter of the server record."""
    try:
        return ServerLayout.read_boot(body)
    except ValueError as e:
        raise MalformedRecord(str(e)) from None


def read_quota(body: bytes) -> Quota:
    """A quota resource's record, checked as ``create_quota`` checks it."""
    data = _json_object(body)
    try:
        check_name("quota", data.get("name"))
        return Quota(**data)
    except (TypeError, ValueError, InvalidArgumentError) as e:
        raise MalformedRecord(f"invalid quota: {e}") from None


def read_subscription(body: bytes) -> SubscriptionSpec:
    """A durable subscription's record, checked as creating it checks it."""
    try:
        record = ServerLayout.read_subscription(body)
        spec = SubscriptionSpec(
            check_name("topic", record.topic),
            check_name("subscription", record.name),
            None if record.client_id is None else check_name("client id", record.client_id),
            record.selector,
            True,
            record.shared,
            record.no_local,
        )
        selector = Selector(spec.selector)
        if selector.text:
            selector.native()  # what the broker core evaluates
    except (TypeError, ValueError, JmsStoreError) as e:  # JmsStoreError: a name or the selector
        raise MalformedRecord(f"invalid subscription: {e}") from None
    return spec


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
        index: HeaderIndex | None = None,
    ) -> None:
        self.layout = layout
        self._index = index
        self._store = store
        self._pager = pager
        self._native = native
        self._registry = registry
        self._limits = limits
        self._progress = progress
        self.malformed_records = 0
        # Records set aside: (record, body, collection); collections whose
        # records all go; replacement records (collection, body).
        self._aside: list[tuple[int, bytes, str]] = []
        self._moving: list[str] = []
        self._puts: list[tuple[str, bytes]] = []

    def load(self) -> dict[str, Any]:
        """Loads everything; returns what was found (``JMSServer.recovered``)."""
        layout, store, registry = self.layout, self._store, self._registry
        boot = self._boot()
        in_doubt, stale, malformed = self._native.recover_deliveries()
        for handle in malformed:
            body = store.read(handle)
            reason = f"{len(body)} bytes are not whole delivery record entries"
            self._set_aside(handle, body, layout.delivered, reason)
        known = {layout.server, layout.delivered, layout.quotas, layout.destinations, layout.subscriptions}
        self._quotas()
        aside_owners, unsure = self._destinations(known)
        for kind, name in sorted(aside_owners):
            if kind == "queue" and name not in registry.queues:
                self._moving.append(layout.queue(name))
        topics_aside = {name for kind, name in aside_owners if kind == "topic" and name not in registry.topics}
        self._subscriptions(known, stale, topics_aside, unsure)
        newest = self._messages()
        # Messages whose consumer's process died with them in hand more often than
        # their redelivery limit allows go to their error destination (or are dropped).
        _, _, kept = self._native.finish_recovery()
        for handle, reason in kept:
            log.warning(
                "JMS server %r: message record %d is past its redelivery limit but could not be moved (%s); "
                "it is redelivered, and moved at its next return",
                layout.name,
                handle,
                reason,
            )
        if boot is None:
            # The boot counter was lost: continue after the newest boot a
            # recovered message id tells (ids of messages already gone may
            # come again).
            boot = newest >> BOOT_SHIFT
            self._puts.append((layout.server, layout.boot_record(boot + 1)))
        # Objects of destinations whose deletion was interrupted.
        known.update(self._moving)
        for collection in store.collections():
            if collection in known or layout.is_quarantine(collection) or not collection.startswith(layout.prefix):
                continue
            if unsure:
                # A destination record set aside without a readable name: what
                # looks like the leftovers of an interrupted deletion may be its data.
                self._moving.append(collection)
            else:
                stale.extend(store.handles(collection))
        self._quarantine()
        if stale:
            with store.transaction() as txn:
                for handle in stale:
                    txn.delete(handle)
        return {
            "boot": boot + 1,
            "queues": len(registry.queues),
            "topics": len(registry.topics),
            "durable_subscriptions": len(registry.durable) + len(registry.shared),
            "messages": sum(self._pager.count(t.pager_id) for t in registry.targets()),
            "in_doubt_deliveries": in_doubt,
            "stale_records_removed": len(stale),
            "malformed_records": self.malformed_records,
        }

    def _boot(self) -> int | None:
        """Raises the boot counter; None if its record was set aside."""
        store, layout = self._store, self.layout
        records = list(store.scan(layout.server))
        if not records:
            store.put(layout.server, layout.boot_record(1))
            return 0
        handle, body = records[-1]
        try:
            boot = read_boot(body)
        except MalformedRecord as e:
            # Replaced once the messages are loaded: their ids tell the boots they came from.
            self._set_aside(handle, body, layout.server, str(e))
            return None
        store.update(handle, layout.boot_record(boot + 1))
        return boot

    def _quotas(self) -> None:
        for handle, body in self._store.scan(self.layout.quotas):
            try:
                quota = read_quota(body)
                if quota.name in self._limits.quotas:
                    raise MalformedRecord(f"a second record of quota {quota.name!r}")
            except MalformedRecord as e:
                self._set_aside(handle, body, self.layout.quotas, str(e))
                continue
            self._limits.define_quota(quota, handle, [])

    def _destinations(self, known: set[str]) -> tuple[set[tuple[str, str]], bool]:
        """Loads the destinations; returns those whose record was set aside
        and whether one of them had no readable name."""
        registry = self._registry
        aside_owners: set[tuple[str, str]] = set()
        unsure = False
        for handle, body in self._store.scan(self.layout.destinations):
            try:
                kind, name, settings = read_destination(body)
                if settings.quota is not None and settings.quota not in self._limits.quotas:
                    raise MalformedRecord(f"its quota {settings.quota!r} does not exist", (kind, name))
                if kind != "topic" and settings.messages_limit_override != -1:
                    raise MalformedRecord("messages_limit_override is a topic setting", (kind, name))
            except MalformedRecord as e:
                self._set_aside(handle, body, self.layout.destinations, str(e))
                if e.owner is None:
                    unsure = True
                else:
                    aside_owners.add(e.owner)
                continue
            if name in (registry.queues if kind == "queue" else registry.topics):
                # Its messages are the first record's.
                self._set_aside(handle, body, self.layout.destinations, f"a second record of {kind} {name!r}")
                continue
            if kind == "queue":
                state = registry.add_queue(Queue(name), settings, handle)
                known.add(state.target.collection or "")
            else:
                registry.add_topic(Topic(name), settings, handle)
        return aside_owners, unsure

    def _subscriptions(self, known: set[str], stale: list[int], topics_aside: set[str], unsure: bool) -> None:
        registry = self._registry
        for handle, body in self._store.scan(self.layout.subscriptions):
            try:
                spec = read_subscription(body)
            except MalformedRecord as e:
                self._set_aside(handle, body, self.layout.subscriptions, str(e))
                self._moving.append(self.layout.subscription(handle))  # its messages
                continue
            topic = registry.topics.get(spec.topic)
            if topic is None and (unsure or spec.topic in topics_aside):
                # Its topic's record was set aside: it goes too, with its messages.
                self._set_aside(handle, body, self.layout.subscriptions, None)
                self._moving.append(self.layout.subscription(handle))
                continue
            if topic is None:  # its topic's deletion was interrupted
                stale.append(handle)
                continue
            sub = registry.add_subscription(topic, spec, handle)
            known.add(sub.collection or "")

    def _messages(self) -> int:
        """Loads every target's stored messages (natively); returns the newest message id."""
        store = self._store
        targets = [t for t in self._registry.targets() if t.collection is not None]
        total = sum(store.count(t.collection) for t in targets if t.collection is not None)
        done = 0
        newest = 0
        for target in targets:
            assert target.collection is not None
            base = done

            def progress(n: int, base: int = base) -> None:
                if self._progress is not None:
                    self._progress("messages", base + n, total)

            messages, _, malformed, newest_id = self._native.load(target.native, self._index, progress)
            done += messages
            newest = max(newest, newest_id)
            for handle, reason in malformed:
                self._set_aside(handle, store.read(handle), target.collection, reason)
        if self._progress is not None:
            self._progress("messages", done, total)
        return newest

    def _set_aside(self, handle: int, body: bytes, collection: str, reason: str | None) -> None:
        """Recovery cannot use record ``handle`` of ``collection`` (``reason``:
        why; None: it goes with its owner's record): it is moved to quarantine."""
        if reason is not None:
            self.malformed_records += 1
            log.warning(
                "JMS server %r: record %d in %s cannot be recovered (%s); it is kept aside in %s",
                self.layout.name,
                handle,
                collection,
                reason,
                self.layout.quarantine(collection),
            )
        self._aside.append((handle, body, collection))

    def _quarantine(self) -> None:
        """Moves every record of the collections set aside whole, then the
        records set aside, to ``quarantine/<collection>``: each in a store
        transaction that puts the copy and deletes the original. The
        collections go first: a crash before the records moved leaves the
        records to find, and so the collections to move, at the next open."""
        store, layout = self._store, self.layout
        for source in self._moving:
            handles = list(store.handles(source))
            if not handles:
                continue
            target = layout.quarantine(source)
            log.warning(
                "JMS server %r: the %d records of %s belong to a record kept aside; they are kept aside in %s",
                layout.name,
                len(handles),
                source,
                target,
            )
            start = 0
            while start < len(handles):
                with store.transaction() as txn:
                    size, count = 0, 0
                    # Transactions of at most 1,000 records or about 8 MiB.
                    while start < len(handles) and count < 1000 and size < 8 << 20:
                        body = store.read(handles[start])
                        txn.put(target, body)
                        txn.delete(handles[start])
                        count += 1
                        size += len(body)
                        start += 1
        if self._aside or self._puts:
            with store.transaction() as txn:
                for handle, body, collection in self._aside:
                    txn.put(layout.quarantine(collection), body)
                    txn.delete(handle)
                for collection, body in self._puts:
                    txn.put(collection, body)

    def quarantined_records(self) -> int:
        """Records in this server's quarantine collections (set aside at any open)."""
        return sum(n for name, n in self._store.collections().items() if self.layout.is_quarantine(name))
