"""A server's statistics as plain data (WebLogic's JMS runtime statistics:
current, pending, high and received counts per server, destination,
quota and durable subscription; expired, paged, deleted-by-limit and
dropped messages; blocked senders and flow-controlled producers).

The counts are the broker core's (native, updated once per message on
whatever thread); this module only reads and assembles them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jmsstore._native import NativeBroker, NativePager
from jmsstore.broker.limits import ServerLimits
from jmsstore.broker.pause import PauseControl
from jmsstore.broker.post import PostOffice
from jmsstore.broker.registry import Registry, State, SubscriptionState, Target, TopicState
from jmsstore.store import FileStore

__all__ = ["Statistics"]


class Statistics:
    """Reads a server's statistics."""

    def __init__(
        self,
        name: str,
        boot: int,
        store: FileStore,
        pager: NativePager,
        native: NativeBroker,
        registry: Registry,
        limits: ServerLimits,
        pause: PauseControl,
        post: PostOffice,
        connections: Any,
        recovery: Callable[[], dict[str, int]],
    ) -> None:
        self._name = name
        self._boot = boot
        self._store = store
        self._pager = pager
        self._native = native
        self._registry = registry
        self._limits = limits
        self._pause = pause
        self._post = post
        self._connections = connections
        self._recovery = recovery  # what recovery set aside

    def _paged(self, target: Target) -> int:
        """A target's messages whose bodies are not in memory (paged out, or only in the store)."""
        messages, resident, _ = self._pager.residency(target.pager_id)
        return int(messages - resident)

    def _count(self, target: Target) -> int:
        return int(self._pager.count(target.pager_id))

    def _units(self, target: Target) -> tuple[int, int]:
        """A target's units of order with messages, and of them those a consumer holds."""
        units, held = self._pager.units(target.pager_id)
        return int(units), int(held)

    def _flow_controlled(self, state: State | None) -> int:
        return sum(
            1
            for p in list(self._post.producers)
            if p.flow_limit is not None and (state is None or p.destination == state.destination)
        )

    def subscription(self, s: SubscriptionState) -> dict[str, Any]:
        held = s.native.held.statistics()
        pending = s.native.pending
        return dict(
            s.spec.to_json(),
            messages=self._count(s),
            active=s.consumers,
            subscription_limit_deleted_count=s.native.limit_deleted,
            messages_paged=self._paged(s),
            units_of_order=self._units(s)[0],
            units_of_order_held=self._units(s)[1],
            messages_pending=pending.messages,
            bytes_pending=pending.bytes,
            messages_expired=s.native.expired,
            **{k: v for k, v in held.items() if k != "flow_control_armed"},
        )

    def durable_subscriptions(self) -> list[dict[str, Any]]:
        return [self.subscription(s) for s in self._registry.durable_subscriptions()]

    def collect(self) -> dict[str, Any]:
        registry, limits = self._registry, self._limits
        with registry.lock:
            counters = self._native.counters()
            targets = [t for t in registry.targets() if not t.deleted]
            states = registry.states()
            usages = limits.all_usages(states)
            queues = {
                n: {
                    "messages": self._count(q.target),
                    "consumers": q.target.consumers,
                    "quota": q.settings.quota,
                    "messages_pending": q.target.native.pending.messages,
                    "bytes_pending": q.target.native.pending.bytes,
                    "blocked_senders": q.usage.blocked_for(q),
                    "flow_controlled_producers": self._flow_controlled(q),
                    "messages_paged": self._paged(q.target),
                    "units_of_order": self._units(q.target)[0],
                    "units_of_order_held": self._units(q.target)[1],
                    "paused": sorted(q.paused),
                    "held_by_insertion_pause": self._native.held_count(q.native),
                    "messages_expired": q.native.messages_expired,
                    **q.gauge.statistics(),
                }
                for n, q in registry.queues.items()
            }
            topics = {n: self._topic(t) for n, t in registry.topics.items()}
            return {
                "name": self._name,
                "boot": self._boot,
                "sent": counters["sent"],
                "received": counters["received"],
                "acknowledged": counters["acknowledged"],
                "redelivered": counters["redelivered"],
                "expired": counters["expired"],
                "moved_to_error_destination": counters["moved_to_error_destination"],
                "dropped_after_redelivery_limit": counters["dropped_after_redelivery_limit"],
                "delivery_records": counters["delivery_records"],
                "delivery_records_at_send": counters["delivery_records_at_send"],
                "dropped_over_system_limit": counters["dropped_over_system_limit"],
                "one_way_dropped": self._post.one_way.dropped,
                "one_way_waited": self._post.one_way.waited,
                "expired_redirected": counters["expired_redirected"],
                "subscription_limit_deleted_count": sum(
                    x.native.limit_deleted for t in registry.topics.values() for x in t.subscriptions
                ),
                "paused": sorted(self._pause.server),
                "connections": len(self._connections),
                **limits.gauge.statistics(),
                "messages_pending": sum(t.native.pending.messages for t in targets),
                "bytes_pending": sum(t.native.pending.bytes for t in targets),
                "blocked_senders": sum(u.blocked_senders for u in usages),
                "flow_controlled_producers": self._flow_controlled(None),
                "server_quota": limits.server_usage.statistics(),
                "quotas": {
                    name: [u.statistics() for u in limits.usages_of(name, states)] for name in sorted(limits.quotas)
                },
                "queues": queues,
                "topics": topics,
                "durable_subscriptions": self.durable_subscriptions(),
                "store": self._store.stats(),
                "pager": self._pager.stats(),
                **self._recovery(),
            }

    def _topic(self, t: TopicState) -> dict[str, Any]:
        subs = t.subscriptions
        return {
            "subscriptions": len(subs),
            "messages": sum(self._count(x) for x in subs),
            "quota": t.settings.quota,
            "blocked_senders": t.usage.blocked_for(t),
            "flow_controlled_producers": self._flow_controlled(t),
            "messages_pending": sum(x.native.pending.messages for x in subs),
            "bytes_pending": sum(x.native.pending.bytes for x in subs),
            "messages_paged": sum(self._paged(x) for x in subs),
            # Each subscription processes a unit on its own: counted once per subscription.
            "units_of_order": sum(self._units(x)[0] for x in subs),
            "units_of_order_held": sum(self._units(x)[1] for x in subs),
            "paused": sorted(t.paused),
            "held_by_insertion_pause": self._native.held_count(t.native),
            "subscription_limit_deleted_count": sum(x.native.limit_deleted for x in subs),
            "messages_expired": t.native.messages_expired,
            **t.gauge.statistics(),
        }

    def underflows(self) -> int:
        """Counts taken below zero anywhere (a message counted out twice): 0 unless there is a bug."""
        registry, limits = self._registry, self._limits
        states = registry.states()
        accounts = [limits.gauge, *(s.gauge for s in states), *(u.account for u in limits.all_usages(states))]
        accounts += [a for t in registry.targets() for a in (t.native.held, t.native.pending)]
        return sum(a.underflows for a in accounts)
