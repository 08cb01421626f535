"""The registry: a server's destinations (queues, topics, temporary
queues), their subscriptions, and their records in the store.

Each queue and topic is a :class:`QueueState` / :class:`TopicState` here,
holding its settings, its quota usage, its pauses and its native parts
(the broker core's ``NativeDestination``); what consumers read from (a
queue, or one subscription of a topic) is a :class:`Target` (a
``NativeTarget``: one pager destination, its store collection, its bell
and counts). Everything done per message happens in the broker core on
those native parts; the registry creates, configures and removes them,
and writes their records (see :mod:`jmsstore.broker.layout`).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jmsstore._native import Doorbell, NativeBroker, NativeDestination, NativePager, NativeTarget
from jmsstore.broker.layout import ServerLayout
from jmsstore.broker.limits import QuotaUsage, ServerLimits, set_thresholds
from jmsstore.broker.settings import DestinationSettings
from jmsstore.errors import IllegalStateError, InvalidArgumentError, InvalidDestinationError
from jmsstore.jms.destination import Destination, Queue, TemporaryQueue, Topic
from jmsstore.selector import Selector
from jmsstore.store import FileStore

__all__ = ["QueueState", "Registry", "SubscriptionSpec", "SubscriptionState", "Target", "TopicState"]


class Target:
    """What consumers read from: a queue, or one subscription of a topic."""

    def __init__(self, native: NativeTarget, owner: QueueState | TopicState) -> None:
        self.native = native
        self.pager_id = native.pager_id
        self.bell: Doorbell = native.bell
        self.owner = owner  # whose quota and counts its messages are in
        self.consumers = 0

    @property
    def deleted(self) -> bool:
        return self.native.deleted

    @property
    def collection(self) -> str | None:
        return self.native.collection


class DestinationState:
    """A queue or topic of the server: its settings, record, quota usage,
    pauses and native parts."""

    kind = "destination"

    def __init__(
        self,
        destination: Destination,
        settings: DestinationSettings,
        record: int | None,
        native: NativeDestination,
        usage: QuotaUsage,
    ) -> None:
        self.settings = settings
        self.record = record
        self.native = native
        self.gauge = native.gauge
        self.usage = usage
        self.paused: set[str] = set()


class QueueState(DestinationState):
    """A queue (or temporary queue) of the server."""

    kind = "queue"

    def __init__(
        self,
        destination: Queue,
        settings: DestinationSettings,
        record: int | None,
        native: NativeDestination,
        usage: QuotaUsage,
    ) -> None:
        super().__init__(destination, settings, record, native, usage)
        self.destination = destination
        self.target: Target  # set once its native target exists

    @property
    def targets(self) -> list[Target]:
        return [self.target]


class TopicState(DestinationState):
    """A topic of the server: its subscriptions are its targets."""

    kind = "topic"

    def __init__(
        self,
        destination: Topic,
        settings: DestinationSettings,
        record: int | None,
        native: NativeDestination,
        usage: QuotaUsage,
    ) -> None:
        super().__init__(destination, settings, record, native, usage)
        self.destination = destination
        self.subscriptions: list[SubscriptionState] = []

    @property
    def targets(self) -> list[Target]:
        return list(self.subscriptions)


State = QueueState | TopicState


@dataclass
class SubscriptionSpec:
    """What identifies and defines a subscription."""

    topic: str
    name: str | None  # None: a non-durable, unshared subscription
    client_id: str | None
    selector: str | None
    durable: bool
    shared: bool
    no_local: bool = False  # JMS 2.0 §8.3.1 / §8.3.3: not the messages of its own connection (client id)

    def key(self) -> tuple[str | None, str | None, bool, bool]:
        # JMS 2.0 §6.11: shared subscriptions are named in the client id's
        # namespace if one is set, unshared durable ones need a client id.
        return (self.client_id, self.name, self.durable, self.shared)

    def to_json(self) -> dict[str, Any]:
        """Its fields, as the statistics report them (the stored record of a
        durable one is :meth:`ServerLayout.subscription_record`)."""
        return {
            "topic": self.topic,
            "name": self.name,
            "client_id": self.client_id,
            "selector": self.selector,
            "durable": self.durable,
            "shared": self.shared,
            "no_local": self.no_local,
        }


class SubscriptionState(Target):
    """A subscription of a topic: durable (stored, with a record) or not."""

    def __init__(self, native: NativeTarget, topic: TopicState, spec: SubscriptionSpec, record: int | None) -> None:
        super().__init__(native, topic)
        self.topic = topic
        self.spec = spec
        self.record = record
        self.selector = Selector(spec.selector)


class Registry:
    """A server's destinations and subscriptions. Every change takes
    ``lock`` (the server's), and writes its record before it is visible."""

    def __init__(
        self,
        layout: ServerLayout,
        store: FileStore,
        pager: NativePager,
        native: NativeBroker,
        limits: ServerLimits,
        lock: threading.RLock,
    ) -> None:
        self.layout = layout
        self._store = store
        self._pager = pager
        self._native = native
        self._limits = limits
        self.lock = lock
        self.queues: dict[str, QueueState] = {}
        self.topics: dict[str, TopicState] = {}
        self.durable: dict[tuple[str | None, str | None, bool, bool], SubscriptionState] = {}
        self.shared: dict[tuple[str | None, str | None, bool, bool], SubscriptionState] = {}
        self.by_pager_id: dict[int, Target] = {}
        self._temporary_counter = itertools.count(1)
        self._non_durable_counter = itertools.count(1)
        # Told of every new destination (pause control applies server-wide pauses to it).
        self.on_new_state: Callable[[State], None] = lambda state: None

    # ------------------------------------------------------------ lookups

    def states(self) -> list[State]:
        return [*self.queues.values(), *self.topics.values()]

    def targets(self) -> list[Target]:
        return list(self.by_pager_id.values())

    def state_of(self, destination: object) -> State:
        """The live state of a destination; ``InvalidDestinationError`` if there is none."""
        if not isinstance(destination, Destination):
            raise InvalidDestinationError(f"a destination is a Queue or Topic, not {type(destination).__name__}")
        if destination.kind == "topic":
            topic = self.topics.get(destination.name)
            if topic is None:
                raise InvalidDestinationError(f"topic {destination.name!r} does not exist (or was deleted)")
            return topic
        state = self.queues.get(destination.name)
        if state is None or state.destination.kind != destination.kind:
            raise InvalidDestinationError(f"queue {destination.name!r} does not exist (or was deleted)")
        return state

    def queue(self, name: str) -> Queue:
        state = self.queues.get(name)
        if state is None:
            raise InvalidDestinationError(f"no queue {name!r}")
        return state.destination

    def topic(self, name: str) -> Topic:
        state = self.topics.get(name)
        if state is None:
            raise InvalidDestinationError(f"no topic {name!r}")
        return state.destination

    # ------------------------------------------------------------ building states

    def _apply_settings(self, state: State) -> None:
        """Hands the per-message settings to the broker core."""
        s = state.settings
        state.native.set_settings(s.redelivery_delay, s.redelivery_limit, s.error_destination, s.expiration_policy)
        set_thresholds(state.gauge, s.thresholds())
        if isinstance(state, TopicState):
            for sub in state.subscriptions:
                sub.native.set_subscription_limit(s.messages_limit_override)

    def add_queue(self, queue: Queue, settings: DestinationSettings, record: int | None) -> QueueState:
        """A queue's state and native parts (its record is the caller's)."""
        persistent = not isinstance(queue, TemporaryQueue)
        usage = self._limits.usage_for(settings, queue.name)
        native = NativeDestination(queue.name, False, usage.account, usage.preemptive)
        state = QueueState(queue, settings, record, native, usage)
        pager_id = self._pager.create_destination(f"q/{queue.name}", settings.order)
        target = NativeTarget(pager_id, native, self.layout.queue(queue.name) if persistent else None)
        native.add_target(target)
        state.target = Target(target, state)
        self._apply_settings(state)
        self._native.add_destination(native)
        self._native.add_target(target)
        self.by_pager_id[pager_id] = state.target
        self.queues[queue.name] = state
        self.on_new_state(state)
        return state

    def add_topic(self, topic: Topic, settings: DestinationSettings, record: int | None) -> TopicState:
        usage = self._limits.usage_for(settings, topic.name)
        native = NativeDestination(topic.name, True, usage.account, usage.preemptive)
        state = TopicState(topic, settings, record, native, usage)
        self._apply_settings(state)
        self._native.add_destination(native)
        self.topics[topic.name] = state
        self.on_new_state(state)
        return state

    def add_subscription(self, topic: TopicState, spec: SubscriptionSpec, record: int | None) -> SubscriptionState:
        """A subscription's state and native target (its record is the caller's)."""
        pager_name = f"s/{record}" if record is not None else f"n/{next(self._non_durable_counter)}"
        pager_id = self._pager.create_destination(pager_name, topic.settings.order)
        selector = Selector(spec.selector)
        native = NativeTarget(
            pager_id,
            topic.native,
            self.layout.subscription(record) if record is not None else None,
            routing=True,
            # Applied by the core's router to every message published to the topic.
            selector=selector.native() if selector.text else None,
            no_local=spec.no_local,
            client_id=spec.client_id,
        )
        native.set_subscription_limit(topic.settings.messages_limit_override)
        sub = SubscriptionState(native, topic, spec, record)
        topic.subscriptions.append(sub)
        topic.native.add_target(native)
        self._native.add_target(native)
        self.by_pager_id[pager_id] = sub
        if spec.durable or spec.shared:
            (self.shared if spec.shared else self.durable)[spec.key()] = sub
        return sub

    # ------------------------------------------------------------ destinations

    def create(self, destination: Queue | Topic, changes: dict[str, Any]) -> Destination:
        """Creates the queue or topic (its record first), or applies
        ``changes`` to the existing one. Everything is checked before
        anything is written: a bad argument changes nothing."""
        name, kind = destination.name, destination.kind
        with self.lock:
            other = self.topics if kind == "queue" else self.queues
            if name in other:
                raise InvalidDestinationError(f"{name!r} is a {'topic' if kind == 'queue' else 'queue'}")
            existing: State | None = self.queues.get(name) if kind == "queue" else self.topics.get(name)
            if existing is not None:
                if changes:
                    self.configure(existing, changes)
                return existing.destination
            settings = DestinationSettings().updated(**changes)
            self.check(settings, kind, name)
            record = self._store.put(
                self.layout.destinations, self.layout.destination_record(kind, name, settings.to_json())
            )
            if isinstance(destination, Queue):
                self.add_queue(destination, settings, record)
            else:
                self.add_topic(destination, settings, record)
            return destination

    def check(self, settings: DestinationSettings, kind: str, own: str) -> None:
        """What a destination's settings may refer to exists, and fits its kind."""
        error = settings.error_destination
        if error is not None and error not in self.queues and error not in self.topics:
            raise InvalidDestinationError(f"error destination {error!r} of {own!r} does not exist")
        self._limits.check_quota(settings)
        if kind != "topic" and settings.messages_limit_override != -1:
            raise InvalidArgumentError("messages_limit_override is a topic setting (a limit per subscription)")

    def configure(self, state: State, changes: dict[str, Any]) -> None:
        """Applies setting changes to a destination (its record first)."""
        with self.lock:
            config = state.settings.updated(**changes)
            if config.order != state.settings.order:
                raise InvalidArgumentError("a destination's order cannot change once created")
            self.check(config, state.destination.kind, state.destination.name)
            assert state.record is not None
            self._store.update(
                state.record,
                self.layout.destination_record(state.destination.kind, state.destination.name, config.to_json()),
            )
            previous, state.settings = state.settings, config
            self._apply_settings(state)
            if config.quota != previous.quota:
                self._limits.switch_quota(state, config, self.states())

    def settings(self, destination: Destination) -> DestinationSettings:
        with self.lock:
            return self.state_of(destination).settings

    def destinations(self) -> list[Destination]:
        with self.lock:
            return [s.destination for s in self.states()]

    def delete(self, destination: Destination) -> None:
        """Deletes a queue or topic with its messages (and a topic's
        subscriptions). Fails while it has consumers, or while another
        destination names it as its error destination."""
        if not isinstance(destination, Destination):
            raise TypeError(f"destination is a Queue or Topic, not {type(destination).__name__}")
        with self.lock:
            state = self.state_of(destination)
            # Else their messages past the redelivery limit would be dropped, not moved.
            users = sorted(
                f"{s.destination.kind} {s.destination.name!r}"
                for s in self.states()
                if s is not state and s.settings.error_destination == destination.name
            )
            if users:
                raise IllegalStateError(
                    f"{destination.kind} {destination.name!r} is the error destination of {', '.join(users)}: "
                    "change their error_destination first"
                )
            if isinstance(state, TopicState):
                if any(s.consumers for s in state.subscriptions):
                    raise IllegalStateError(f"topic {destination.name!r} has active subscribers")
                targets: list[Target] = list(state.subscriptions)
            else:
                if state.target.consumers:
                    raise IllegalStateError(f"queue {destination.name!r} has consumers")
                targets = [state.target]
            # The records go first, in one transaction: a crash after it
            # leaves only orphan messages, which recovery removes.
            with self._store.transaction() as txn:
                if state.record is not None:
                    txn.delete(state.record)
                for t in targets:
                    if isinstance(t, SubscriptionState) and t.record is not None:
                        txn.delete(t.record)
            if isinstance(state, TopicState):
                del self.topics[destination.name]
                for sub in state.subscriptions:
                    (self.shared if sub.spec.shared else self.durable).pop(sub.spec.key(), None)
            else:
                del self.queues[destination.name]
            self._native.remove_destination(destination.name)
            for t in targets:
                self.drop_target(t)

    def drop_target(self, target: Target) -> None:
        """Removes a target and its messages (store, pager, counts)."""
        self.by_pager_id.pop(target.pager_id, None)
        self._native.drop_target(target.native)

    # ------------------------------------------------------------ subscriptions

    def subscribe(self, spec: SubscriptionSpec, owner_connection: int) -> SubscriptionState:
        """The subscription for ``spec``, created if needed; counts a consumer on it."""
        with self.lock:
            topic = self.topics.get(spec.topic)
            if topic is None:
                raise InvalidDestinationError(f"topic {spec.topic!r} does not exist (or was deleted)")
            selector = Selector(spec.selector)  # InvalidSelectorError before anything changes
            if selector.text:
                selector.native()
            if not spec.durable and not spec.shared:
                sub = self.add_subscription(topic, spec, None)
                sub.native.set_owner_connection(owner_connection)
                sub.consumers = 1
                return sub
            table = self.shared if spec.shared else self.durable
            if spec.durable:
                # JMS 2.0 §8.3.3 / §8.3.4: a shared and an unshared durable subscription
                # may not have the same name and client identifier.
                other_kind = self.durable if spec.shared else self.shared
                if other_kind.get((spec.client_id, spec.name, True, not spec.shared)) is not None:
                    raise IllegalStateError(
                        f"{'an unshared' if spec.shared else 'a shared'} durable subscription {spec.name!r} "
                        f"of client {spec.client_id!r} already exists"
                    )
            existing = table.get(spec.key())
            if existing is not None:
                if (
                    existing.spec.topic == spec.topic
                    and existing.spec.selector == spec.selector
                    and existing.spec.no_local == spec.no_local
                ):
                    if not spec.shared and existing.consumers:
                        raise IllegalStateError(
                            f"durable subscription {spec.name!r} of client {spec.client_id!r} already has a consumer"
                        )
                    existing.consumers += 1
                    return existing
                # JMS 2.0 §8.3.3: a changed topic, selector or noLocal replaces the subscription.
                if existing.consumers:
                    raise IllegalStateError(f"subscription {spec.name!r} is active and cannot change topic or selector")
                self.remove_subscription(existing)
            record = None
            if spec.durable:
                assert spec.name is not None  # a durable subscription is named (JMS 2.0 §6.11)
                body = self.layout.subscription_record(
                    spec.topic, spec.name, spec.client_id, spec.selector, spec.shared, spec.no_local
                )
                record = self._store.put(self.layout.subscriptions, body)
            sub = self.add_subscription(topic, spec, record)
            sub.consumers = 1
            return sub

    def consumer_closed(self, target: Target) -> None:
        """A consumer of ``target`` closed; a non-durable subscription ends with its last consumer."""
        with self.lock:
            target.consumers -= 1
            if (
                isinstance(target, SubscriptionState)
                and target.consumers == 0
                and not target.spec.durable
                and not target.deleted
            ):
                self.remove_subscription(target)

    def remove_subscription(self, sub: SubscriptionState) -> None:
        with self.lock:
            if sub.record is not None:
                self._store.delete(sub.record)
            if sub in sub.topic.subscriptions:
                sub.topic.subscriptions.remove(sub)
            table = self.shared if sub.spec.shared else self.durable
            if table.get(sub.spec.key()) is sub:
                del table[sub.spec.key()]
            sub.topic.native.remove_target(sub.native)
            self.drop_target(sub)

    def unsubscribe(self, client_id: str | None, name: str) -> None:
        """Deletes durable subscription ``name`` of ``client_id`` (JMS ``Session.unsubscribe``)."""
        with self.lock:
            sub = self.durable.get((client_id, name, True, False)) or self.shared.get((client_id, name, True, True))
            if sub is None:
                raise InvalidDestinationError(f"no durable subscription {name!r} for client id {client_id!r}")
            if sub.consumers:
                raise IllegalStateError(f"durable subscription {name!r} has an active consumer")
            if self.has_reserved(sub):
                # JMS 2.0 §8.3.3: erroneous while a message received from it is part of a
                # current transaction or has not been acknowledged.
                raise IllegalStateError(
                    f"durable subscription {name!r} has messages delivered but not yet acknowledged or committed"
                )
            self.remove_subscription(sub)

    def durable_topic(self, client_id: str | None, name: str) -> Topic | None:
        """The topic of durable subscription ``name`` of ``client_id`` (or shared), if there is one."""
        with self.lock:
            sub = self.durable.get((client_id, name, True, False)) or self.shared.get((client_id, name, True, True))
            return None if sub is None else Topic(sub.spec.topic)

    def has_reserved(self, target: Target) -> bool:
        """Whether a session holds any of the target's messages (delivered, not yet acknowledged)."""
        pager = self._pager
        after: int | None = None
        while keys := pager.browse(target.pager_id, after, 1024):
            if any(pager.header(key)["reserved"] for key in keys):
                return True
            after = keys[-1]
        return False

    def durable_subscriptions(self) -> list[SubscriptionState]:
        with self.lock:
            return list(self.durable.values()) + [s for s in self.shared.values() if s.spec.durable]

    # ------------------------------------------------------------ temporary queues

    def create_temporary_queue(self, boot: int, delete: Callable[[TemporaryQueue], None]) -> TemporaryQueue:
        with self.lock:
            name = f"TEMP.{self.layout.name}.{boot}.{next(self._temporary_counter)}"
            queue = TemporaryQueue(name, delete)
            self.add_queue(queue, DestinationSettings(), None)
            return queue

    def delete_temporary_queue(self, queue: TemporaryQueue, force: bool) -> None:
        with self.lock:
            state = self.queues.get(queue.name)
            if state is None:
                return
            if state.target.consumers and not force:
                raise IllegalStateError(f"temporary queue {queue.name!r} has consumers")
            del self.queues[queue.name]
            self._native.remove_destination(queue.name)
            self.drop_target(state.target)
