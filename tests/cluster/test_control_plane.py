"""The etcd control plane against a real etcd: registration under leases,
controller election and re-election, placement, compare-and-set of the
partition state, controlled shutdown and fencing of a new incarnation.
Control planes run in-process here (one per simulated node); the real
processes are in test_cluster_processes.py."""
import asyncio
import time

from kcoord.cluster.etcd_control import YIELD_EVERY_S, EtcdControlPlane
from kcoord.cluster.state import NO_LEADER, PartitionState

TTL_MS = 2000
WAIT = 30.0  # bounded waits: etcd shares 2 loaded cores


class Recorder:
    def __init__(self):
        self.states = []
        self.sessions_lost = 0
        self.sessions_restored = 0
        self.turns = []     # per state: how many earlier states' loop callbacks had run
        self._ran = 0
        self.slow_s = 0.0

    def on_partition_state(self, state):
        self.states.append(state)
        self.turns.append(self._ran)
        asyncio.get_running_loop().call_soon(self._count_turn)
        if self.slow_s:
            time.sleep(self.slow_s)     # a transition that takes its time (a takeover's)

    def _count_turn(self):
        self._ran += 1

    def on_session_lost(self):
        self.sessions_lost += 1

    def on_session_restored(self):
        self.sessions_restored += 1


def plane(etcd, node_id, prefix="/kc-test"):
    p = EtcdControlPlane(node_id, "127.0.0.1", 9000 + node_id, [etcd.endpoint], prefix,
                         TTL_MS)
    p.recorder = Recorder()
    p.listeners.append(p.recorder)
    return p


async def crash(p):
    """Stop without a word: no controlled shutdown, lease left to expire."""
    if p.controller is not None:
        p.controller.cancel()
    p._watch_task.cancel()
    p.session.stop_refreshing()
    await p.session.client.close()


async def wait(p, predicate, what):
    assert await p.wait_for(predicate, WAIT), what


async def all_registered(planes):
    """Every plane sees every node and the controller (placement uses the
    nodes the controller sees)."""
    ids = {p.node_id for p in planes}
    for p in planes:
        await wait(p, lambda p=p: set(p.view.nodes) == ids and p.view.controller is not None,
                   "all registered")


async def registered_planes(etcd, ids) -> dict:
    """Control planes for `ids`, started, each seeing every node and a controller."""
    planes = {i: plane(etcd, i) for i in ids}
    await asyncio.gather(*(p.start() for p in planes.values()))
    await all_registered(list(planes.values()))
    return planes


def test_registration_election_and_placement(etcd):
    async def main():
        planes = [plane(etcd, i) for i in (1, 2, 3)]
        await asyncio.gather(*(p.start() for p in planes))
        try:
            for p in planes:
                await wait(p, lambda p=p: set(p.view.nodes) == {1, 2, 3}, "all registered")
                await wait(p, lambda p=p: p.view.controller is not None, "a controller")
            assert planes[0].view.nodes[2].port == 9002
            controllers = {p.view.controller.node_id for p in planes}
            assert len(controllers) == 1
            assert sum(p.controller is not None for p in planes) == 1
            # the controller key and its epoch share one etcd revision, but the
            # watch lets the loop run between the keys it applies
            await wait(planes[0], lambda: planes[0].view.controller_epoch == 1, "epoch 1")

            for p in planes:  # each transition takes longer than the watch's yield budget
                p.recorder.slow_s = 2 * YIELD_EVERY_S
            record = await planes[1].create_topic("orders", 6, 3)
            assert record is not None and await planes[2].create_topic("orders", 1, 1) is None
            for p in planes:
                await wait(p, lambda p=p: len(p.view.topic_states("orders")) == 6, "placed")
            states = planes[0].view.topic_states("orders")
            for s in states:
                assert sorted(s.replicas) == [1, 2, 3] and s.isr == s.replicas
                assert s.leader == s.replicas[0] and s.leader_epoch == 0
            assert {s.leader for s in states} == {1, 2, 3}
            for p in planes:  # every node's listener heard every partition
                heard = {(s.topic, s.partition) for s in p.recorder.states}
                assert {("orders", i) for i in range(6)} <= heard
                # placed in one etcd transaction, heard one loop turn apart: the
                # loop answers requests between a burst's slow transitions
                turns = [t for s, t in zip(p.recorder.states, p.recorder.turns)
                         if s.topic == "orders"]
                assert all(b > a for a, b in zip(turns, turns[1:])), turns
        finally:
            await asyncio.gather(*(p.stop(controlled=False) for p in planes))
    asyncio.run(main())


def test_alter_isr_is_a_compare_and_set_on_the_version(etcd):
    async def main():
        planes = [plane(etcd, i) for i in (1, 2)]
        await asyncio.gather(*(p.start() for p in planes))
        try:
            await all_registered(planes)
            await planes[0].create_topic("t", 1, 2)
            await wait(planes[0], lambda: planes[0].view.state("t", 0) is not None, "placed")
            s = planes[0].view.state("t", 0)
            shrunk = await planes[0].alter_isr(s.with_isr((s.leader,)))
            assert shrunk is not None and shrunk.isr == (s.leader,) and shrunk.version > s.version
            # the same stale version again: refused, nothing written
            assert await planes[0].alter_isr(s.with_isr(s.replicas)) is None
            await wait(planes[1], lambda: planes[1].view.state("t", 0) == shrunk, "seen")
            assert planes[1].view.state("t", 0).isr == (s.leader,)
            grown = await planes[1].alter_isr(shrunk.with_isr(s.replicas))
            assert grown is not None and grown.isr == s.replicas
        finally:
            await asyncio.gather(*(p.stop(controlled=False) for p in planes))
    asyncio.run(main())


def test_isr_changes_of_one_turn_go_in_one_transaction_each_still_a_compare_and_set(etcd):
    """Proposals made in the same loop turn are written by one etcd
    transaction; when one of them is stale nothing of that transaction is
    written, and each is then written alone on its own compare: the stale
    one is refused, the others are written."""
    async def main():
        planes = await registered_planes(etcd, (1, 2))
        me = planes[1]
        try:
            await me.create_topic("t", 8, 2)
            await wait(me, lambda: len(me.view.topic_states("t")) == 8
                       and all(len(s.isr) == 2 for s in me.view.topic_states("t")), "placed")
            states = me.view.topic_states("t")
            sent = []
            transaction = me.client.transaction

            async def counted(compare, success, failure):
                if not any(c.key == b"/kc-test/controller" for c in compare):
                    sent.append(len(success))  # the ISR writes (not the controller's)
                return await transaction(compare=compare, success=success, failure=failure)
            me.client.transaction = counted
            shrunk = await asyncio.gather(*(me.alter_isr(s.with_isr((s.leader,)))
                                            for s in states))
            assert sent == [8], sent
            assert all(w is not None and w.isr == (s.leader,) and w.version > s.version
                       for s, w in zip(states, shrunk))
            # one stale proposal (the old version) among current ones
            sent.clear()
            proposals = [w.with_isr(s.replicas) for s, w in zip(states, shrunk)]
            proposals[3] = states[3].with_isr(states[3].replicas)
            grown = await asyncio.gather(*(me.alter_isr(p) for p in proposals))
            assert sent == [8] + [1] * 8, sent
            assert grown[3] is None
            for i, (s, w) in enumerate(zip(states, grown)):
                if i != 3:
                    assert w is not None and w.isr == s.replicas, (i, w)
            await wait(planes[2], lambda: all(
                planes[2].view.state("t", s.partition).isr
                == ((s.leader,) if i == 3 else s.replicas)
                for i, s in enumerate(states)), "each partition as its own compare said")
            # each answer carries the version etcd stored (the next proposal's compare)
            for i, w in enumerate(grown):
                if i != 3:
                    assert w.version == planes[2].view.state("t", w.partition).version
        finally:
            await asyncio.gather(*(p.stop(controlled=False) for p in planes.values()))
    asyncio.run(main())


def test_lease_expiry_reelects_controller_and_moves_leaderships(etcd):
    async def main():
        planes = {i: plane(etcd, i) for i in (1, 2, 3)}
        await asyncio.gather(*(p.start() for p in planes.values()))
        try:
            await all_registered(list(planes.values()))
            await planes[1].create_topic("t", 6, 2)
            for p in planes.values():  # each view, the victim's included, holds all six
                await wait(p, lambda p=p: len(p.view.topic_states("t")) == 6, "placed")
            first = planes[1].view.controller
            victim = planes[first.node_id]
            before = {s.partition: s for s in victim.view.topic_states("t")}
            old_stale = next(s for s in before.values() if s.leader == first.node_id)
            await crash(victim)
            rest = [p for i, p in planes.items() if i != first.node_id]
            for p in rest:
                await wait(p, lambda p=p: first.node_id not in p.view.nodes, "lease expired")
                await wait(p, lambda p=p: p.view.controller is not None
                           and p.view.controller.node_id != first.node_id, "new controller")
                await wait(p, lambda p=p: all(
                    s.leader != first.node_id and first.node_id not in s.isr
                    for s in p.view.topic_states("t")), "leaderships moved")
            assert rest[0].view.controller_epoch == first.epoch + 1
            for s in rest[0].view.topic_states("t"):
                old = before[s.partition]
                if old.leader == first.node_id:
                    assert s.leader_epoch == old.leader_epoch + 1
                    assert s.leader in old.isr and s.leader != NO_LEADER
                else:
                    assert (s.leader, s.leader_epoch) == (old.leader, old.leader_epoch)
            # the dead leader's last view cannot write: its version is stale
            assert await rest[0].alter_isr(old_stale) is None
            planes.pop(first.node_id)
        finally:
            await asyncio.gather(*(p.stop(controlled=False) for p in planes.values()))
    asyncio.run(main())


def test_controlled_shutdown_hands_leaderships_over_before_stopping(etcd):
    async def main():
        planes = {i: plane(etcd, i) for i in (1, 2, 3)}
        await asyncio.gather(*(p.start() for p in planes.values()))
        try:
            await all_registered(list(planes.values()))
            await planes[1].create_topic("t", 6, 3)
            await wait(planes[2], lambda: len(planes[2].view.topic_states("t")) == 6, "placed")
            controller = planes[2].view.controller.node_id
            target = controller  # the hardest case: the controller itself stops
            await wait(planes[target], lambda: len(planes[target].view.topic_states("t")) == 6,
                       "placed, seen by the target")
            assert any(s.leader == target for s in planes[target].view.topic_states("t"))
            await planes.pop(target).stop(controlled=True)
            other = next(iter(planes.values()))
            # moved before the lease was revoked: no partition waited for an election
            for s in other.view.topic_states("t"):
                assert s.leader != target and target not in s.isr
            await wait(other, lambda: other.view.controller is not None
                       and other.view.controller.node_id != target, "next controller")
        finally:
            await asyncio.gather(*(p.stop(controlled=False) for p in planes.values()))
    asyncio.run(main())


def test_new_incarnation_is_fenced_and_rejoins_as_follower(etcd):
    """A node that registers under a new lease (restarted, or paused past its
    lease) loses its leaderships with a new epoch before it may lead again."""
    async def main():
        planes = {i: plane(etcd, i) for i in (1, 2)}
        await asyncio.gather(*(p.start() for p in planes.values()))
        try:
            await all_registered(list(planes.values()))
            await planes[1].create_topic("t", 4, 2)
            await wait(planes[1], lambda: len(planes[1].view.topic_states("t")) == 4, "placed")
            controller = planes[1].view.controller.node_id
            node = 2 if controller == 1 else 1
            # its own view too: node 1's having the states says nothing of node 2's
            await wait(planes[node], lambda: len(planes[node].view.topic_states("t")) == 4,
                       "placed, seen by the node")
            led = {s.partition: s for s in planes[node].view.topic_states("t")
                   if s.leader == node}
            assert led
            session = planes[node].session
            await session._grant()  # what a restart or an expired lease leads to
            await planes[node]._reregister()
            watcher = planes[controller]
            await wait(watcher, lambda: all(
                watcher.view.state("t", p).leader != node for p in led), "fenced")
            for p, old in led.items():
                s = watcher.view.state("t", p)
                assert s.leader_epoch > old.leader_epoch and node not in s.isr
        finally:
            await asyncio.gather(*(p.stop(controlled=False) for p in planes.values()))
    asyncio.run(main())


def test_a_new_incarnation_joins_the_isr_only_after_the_controller_fenced_the_old(etcd):
    """A restarted node caught up before the controller handled its bounce:
    had the leader added it to the ISR then (and a move made it leader), the
    controller's late fencing of the old incarnation threw the new one out
    with a new epoch.  The leader may add it only once the bounce is handled,
    checked again by etcd's compare (Kafka's broker epoch in AlterPartition)."""
    from dataclasses import replace

    from kcoord.cluster.state import IneligibleReplica

    async def main():
        planes = await registered_planes(etcd, (1, 2))
        try:
            await planes[1].create_topic("t", 1, 2)
            first = planes[1]
            await wait(first, lambda: first.view.state("t", 0) is not None
                       and first.view.incarnations == first.view.sessions, "placed, handled")
            lead_id = first.view.controller.node_id
            leader, bouncer = planes[lead_id], planes[3 - lead_id]
            # (each plane's view follows etcd's watch on its own)
            await wait(leader, lambda: leader.view.state("t", 0) is not None, "seen by the leader")
            s = leader.view.state("t", 0)
            if s.leader != lead_id:
                assert await leader.replace_state(s, replace(s, leader=lead_id,
                                                             leader_epoch=s.leader_epoch + 1))
                await wait(leader, lambda: leader.view.state("t", 0).leader == lead_id, "moved")
            shrunk = await leader.alter_isr(leader.view.state("t", 0).with_isr((lead_id,)))
            controller = leader.controller
            await controller.stop()  # the controller has not got to the bounce yet
            old_lease = bouncer.session.lease_id
            await bouncer.session._grant()  # what a restart leads to
            await bouncer._reregister()
            await wait(leader, lambda: leader.view.sessions.get(bouncer.node_id) not in
                       (None, old_lease), "new incarnation seen")
            grown = shrunk.with_isr((lead_id, bouncer.node_id))
            assert not leader.view.isr_eligible(bouncer.node_id)
            try:
                await leader.alter_isr(grown)
                raise AssertionError("the unfenced new incarnation joined the ISR")
            except IneligibleReplica:
                pass
            # a view that wrongly holds the bounce as handled: etcd's compare refuses
            leader.view.incarnations[bouncer.node_id] = leader.view.sessions[bouncer.node_id]
            try:
                await leader.alter_isr(grown)
                raise AssertionError("etcd's compare let the new incarnation in")
            except IneligibleReplica:
                pass
            leader.view.incarnations[bouncer.node_id] = old_lease
            controller.start()
            await wait(leader, lambda: leader.view.isr_eligible(bouncer.node_id), "handled")
            assert leader.view.state("t", 0).version == shrunk.version  # nothing moved
            joined = await leader.alter_isr(grown)
            assert joined is not None and joined.isr == (lead_id, bouncer.node_id)
            # the controller's later passes leave the new incarnation in place
            assert await controller.reconcile_once() is False
            await wait(leader, lambda: leader.view.state("t", 0).version >= joined.version,
                       "seen")
            now = leader.view.state("t", 0)
            assert (now.leader, now.leader_epoch, now.isr) == \
                (joined.leader, joined.leader_epoch, joined.isr)
        finally:
            await asyncio.gather(*(p.stop(controlled=False) for p in planes.values()))
    asyncio.run(main())


def test_the_old_incarnations_lease_ending_leaves_the_new_registration(etcd):
    """A restarted node registers under a new lease while the old one may
    still run out later: the put moved its key to the new lease, so the old
    lease's end (expiry, or a late revoke) unregisters nothing."""
    async def main():
        p = plane(etcd, 1)
        await p.start()
        try:
            await wait(p, lambda: 1 in p.view.nodes, "registered")
            old_lease = p.session.lease_id
            await p.session._grant()
            await p._reregister()
            await wait(p, lambda: p.view.sessions.get(1) == p.session.lease_id, "new lease seen")
            await p.client.revoke_lease(old_lease)
            got = await p.client.get(p.keys.node(1).encode())
            assert got is not None and got.lease == p.session.lease_id != old_lease
            assert p.view.sessions.get(1) == p.session.lease_id
        finally:
            await p.stop(controlled=False)
    asyncio.run(main())


def test_nodes_back_as_the_same_processes_keep_their_leaderships(etcd):
    """The whole process (both nodes and so the controller too) stalls past
    the lease, as under SIGSTOP or with etcd paused: on waking each node
    tells its listeners the session was lost and registers again under a
    new lease that names the expired one (the same process: its log and
    memory are whole).  The controller elected next keeps every leadership
    at its epoch and every ISR place (it waits for the other node rather
    than moving its leaderships away), and once a node's incarnation is
    handled its listeners hear that they may acknowledge again."""
    import time

    async def main():
        planes = {i: plane(etcd, i) for i in (1, 2)}
        await asyncio.gather(*(p.start() for p in planes.values()))
        try:
            await all_registered(list(planes.values()))
            await planes[1].create_topic("t", 4, 2)
            await wait(planes[1], lambda: len(planes[1].view.topic_states("t")) == 4
                       and all(len(s.isr) == 2 for s in planes[1].view.topic_states("t")),
                       "placed")
            before = {s.partition: s for s in planes[1].view.topic_states("t")}
            assert {s.leader for s in before.values()} == {1, 2}, before
            old = {i: p.session.lease_id for i, p in planes.items()}
            # node 2 registers again only once node 1 is back and handled (by
            # itself, the controller then: node 2's registration is gone)
            first_back = asyncio.Event()
            reregister = planes[2]._reregister

            async def held():
                await first_back.wait()
                await reregister()
            planes[2].session.on_expired = held
            time.sleep(TTL_MS / 1000 * 2)  # blocks this whole loop: both planes stall
            one = planes[1]
            await wait(one, lambda: one.session.lease_id != old[1] and one.incarnation_handled()
                       and 2 not in one.view.nodes, "node 1 back and handled, node 2 not yet")
            for n, s in before.items():  # the controller did not move node 2's away
                now = one.view.state("t", n)
                assert (now.leader, now.leader_epoch, now.isr) == (s.leader, s.leader_epoch,
                                                                   s.isr), (s, now)
            first_back.set()
            for i, p in planes.items():
                await wait(p, lambda p=p: p.recorder.sessions_lost >= 1, "lapse noticed")
                await wait(p, lambda p=p, i=i: p.view.sessions.get(i) not in (None, old[i])
                           and p.incarnation_handled(), "back under a new lease, handled")
                assert p.view.nodes[i].resumes == old[i]
                await wait(p, lambda p=p: p.recorder.sessions_restored >= 1, "acknowledging")
            watcher = planes[1]
            for n, s in before.items():
                now = watcher.view.state("t", n)
                assert (now.leader, now.leader_epoch, now.isr) == (s.leader, s.leader_epoch,
                                                                   s.isr), (s, now)
        finally:
            await asyncio.gather(*(p.stop(controlled=False) for p in planes.values()))
    asyncio.run(main())


def test_auto_rebalance_returns_leadership_to_the_preferred_replica(etcd):
    async def main():
        planes = {i: plane(etcd, i) for i in (1, 2)}
        for p in planes.values():
            p.rebalance_interval_s = 0.5
        await asyncio.gather(*(p.start() for p in planes.values()))
        try:
            await all_registered(list(planes.values()))
            await planes[1].create_topic("t", 4, 2)
            await wait(planes[1], lambda: len(planes[1].view.topic_states("t")) == 4, "placed")
            s = next(s for s in planes[1].view.topic_states("t") if s.replicas[0] == 1)
            # leadership moved away from its preferred replica (as after a failover),
            # every replica still in sync
            moved = await planes[1].alter_isr(PartitionState(
                s.topic, s.partition, 2, s.leader_epoch + 1, s.isr, s.replicas, s.version))
            assert moved is not None
            await wait(planes[2], lambda: (x := planes[2].view.state("t", s.partition))
                       and x.leader == 1 and x.leader_epoch >= s.leader_epoch + 2,
                       "preferred leader back")
        finally:
            await asyncio.gather(*(p.stop(controlled=False) for p in planes.values()))
    asyncio.run(main())


def test_a_restarted_lone_leader_acts_only_on_a_new_epoch(etcd):
    """A node that led alone registers under a new lease (a restart): its
    listeners never hear the stored state naming it leader at the old
    epoch (followers may hold that incarnation's unfsynced tail); it leads
    again once the controller handled the bounce, at a later epoch."""
    async def main():
        planes = await registered_planes(etcd, (1, 2))
        try:
            controller = planes[1].view.controller.node_id
            node = 3 - controller
            me = planes[node]
            await me.create_topic("lone", 2, 1)
            await wait(me, lambda: len(me.view.topic_states("lone")) == 2
                       and me.incarnation_handled(), "placed, handled")
            led = {s.partition: s for s in me.view.topic_states("lone") if s.leader == node}
            assert led, "placement gave the node a partition"
            heard_before = len(me.recorder.states)
            await me.session._grant()  # what a restart leads to
            await me._reregister()
            # a restarted process seeds its listeners from the view: nothing it
            # leads at the old epoch (the controller, in this same loop, may
            # already have handled the bounce: then only at a new one)
            for s in me.partition_states():
                if s.leader == node:
                    assert me.incarnation_handled() and s.leader_epoch > led[s.partition].leader_epoch, s
            await wait(me, lambda: all(
                (s := me.view.state("lone", p)).leader == node
                and s.leader_epoch > old.leader_epoch for p, old in led.items()),
                "led again at a new epoch")
            heard = me.recorder.states[heard_before:]
            assert [s for s in heard if s.leader == node], "the new leadership was delivered"
            for s in heard:
                if s.leader == node:
                    assert s.leader_epoch >= led[s.partition].leader_epoch + 2, s
        finally:
            await asyncio.gather(*(p.stop(controlled=False) for p in planes.values()))
    asyncio.run(main())
