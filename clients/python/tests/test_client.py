"""Every operation and option of the sync client against a real segstored."""

from __future__ import annotations

import time

import pytest

import segstore
from segstore import (
    MAX_U32,
    CountResult,
    DeleteResult,
    GetOptions,
    GetResult,
    InvalidArgument,
    LimitExceeded,
    LinkedUser,
    LinkResult,
    LinksPage,
    Mode,
    NotFound,
    Op,
    RemoveResult,
    Segment,
    SegmentUpdate as S,
    TrimResult,
    UpsertItem,
    UpsertResult,
    new_write_id,
)

HOUR = 3600
DAY = 86400


@pytest.fixture
def profile(client, user):
    """``user`` with four segments; returns (now before writing, now after)."""
    before = int(time.time())
    client.upsert(
        user,
        [
            S.expiring_in(10, HOUR, attr1=1),
            S.expiring_at(20, before + 2 * HOUR, attr2=2),
            S.forever(30, attr1=3, attr2=4),
            S.expiring_in(40, DAY),
        ],
    )
    return before, int(time.time()) + 1


def test_hello_reports_the_servers_limits(client):
    info = client.hello()
    assert info.protocol == 1
    assert info.server.startswith("segstored ")
    assert (info.max_batch, info.max_frame_bytes, info.max_key_bytes, info.max_segments) == (
        20,
        65536,
        64,
        50,
    )
    assert (info.max_fields, info.max_field_bytes) == (12, 100)
    assert info.max_in_flight == 256
    assert client.server_info == info


def test_connect_says_hello_unless_told_not_to(server):
    with server.client() as c:
        assert c.server_info is not None and c.server_info.max_batch == 20
    with server.client(hello=False) as c:
        assert c.server_info is None
        c.ping()
        assert c.server_info is None


def test_ping_stats_and_cluster_map(client):
    assert client.ping() is None
    stats = client.stats()
    assert str(stats["server.version"]).startswith("segstored ")
    assert stats.get("config.server.max_batch") == 20
    m = client.cluster_map()
    assert m.cluster is False and m.nodes == [] and m.partitions == [] and m.revision == 0


def test_upsert_then_get_full(client, user, profile):
    before, after = profile
    r = client.get(user)
    assert r.count == 4 and r.ids == [10, 20, 30, 40] and not r.stale
    assert before + HOUR <= r.expires[0] <= after + HOUR
    assert r.expires[1] == before + 2 * HOUR
    assert r.expires[2] == 0
    assert before + DAY <= r.expires[3] <= after + DAY
    assert r.attr1 == [1, None, 3, None]
    assert r.attr2 == [None, 2, 4, None]
    assert r.segments[2] == Segment(30, 0, 3, 4) and r.segments[2].never_expires
    assert r.segments[1].expires_datetime().timestamp() == before + 2 * HOUR


def test_get_ids_only(client, user, profile):
    r = client.get(user, projection="ids")
    assert r == GetResult(4, [10, 20, 30, 40])
    assert r.segments[0] == Segment(10) and r.segments[0].expires_at is None
    assert client.get(user, GetOptions(projection=segstore.Projection.IDS)) == r


def test_get_id_range_limit_and_count_only(client, user, profile):
    assert client.get(user, id_from=15, id_to=35, projection="ids") == GetResult(2, [20, 30])
    assert client.get(user, limit=2, projection="ids") == GetResult(4, [10, 20])
    assert client.get(user, count_only=True) == GetResult(4, [])
    assert client.get(user, id_from=41).count == 0  # live segments, none matching: not NotFound
    opts = GetOptions(id_from=15, projection="ids")
    assert client.get(user, opts, limit=1) == GetResult(3, [20])  # keywords override options


def test_get_expiry_window(client, user, profile):
    before, after = profile
    # [now + 5000 s, now + 10000 s] holds segment 20 alone.
    window = dict(expiry_from=after + 5000, expiry_to=before + 10000, projection="ids")
    assert client.get(user, **window).ids == [20]
    # The default expiry_to has no upper bound: the never-expiring segment counts.
    assert client.get(user, expiry_from=after + 5000, projection="ids").ids == [20, 30, 40]
    assert client.get(user, expiry_from=after + 5000, expiry_to=MAX_U32 - 1).ids == [20, 40]
    # Outside [now, now + 5000 s]: "will not expire soon", never-expiring included.
    outside = dict(expiry_from=before, expiry_to=after + 5000, outside_expiry=True)
    assert client.get(user, projection="ids", **outside).ids == [20, 30, 40]


def test_get_of_a_user_without_a_profile_is_not_found(client, user):
    with pytest.raises(NotFound) as e:
        client.get(user)
    assert e.value.status is segstore.Status.NotFound and e.value.code == 1
    assert e.value.message and e.value.op == "get" and e.value.address == client.address
    assert str(e.value) == f"NotFound: get to {client.address}: {e.value.message}"


def test_user_ids_are_bytes_str_or_bin(client, user):
    raw = b"\xff\xfe" + user.encode()  # not UTF-8: sent as bin
    client.upsert(raw, [S.forever(1)])
    assert client.get(raw).ids == [1]
    client.upsert(user.encode(), [S.forever(2)])  # the same bytes as the str
    assert client.get(user).ids == [2]
    with pytest.raises(InvalidArgument):
        client.get(42)  # type: ignore[arg-type]


def test_count(client, user, profile):
    assert client.count(user) == CountResult(4)
    assert client.count(user, id_from=20, id_to=30).count == 2
    assert client.count(user, id_from=1000).count == 0
    with pytest.raises(NotFound):
        client.count(user + "-none")


def test_upsert_counts_and_attributes(client, user):
    r = client.upsert(user, [S.forever(1, attr1=5), S.forever(2)])
    assert r == UpsertResult(inserted=2, updated=0, trimmed=0, count=2)
    # attr None keeps the current value; named segments count as updated.
    r = client.upsert(user, [S.forever(1), S.forever(3, attr2=9)])
    assert r == UpsertResult(inserted=1, updated=1, trimmed=0, count=3)
    g = client.get(user)
    assert g.attr1 == [5, None, None] and g.attr2 == [None, None, 9]
    # Tuples work as SegmentUpdates.
    assert client.upsert(user, [(4, 0), (5, HOUR, True, 1, 2)]).inserted == 2
    # An empty list writes nothing and creates no profile.
    assert client.upsert(user + "-empty", []) == UpsertResult(0, 0, 0, 0)
    with pytest.raises(NotFound):
        client.get(user + "-empty")


def test_upsert_modes(client, user):
    now = int(time.time())
    client.upsert(user, [S.expiring_at(1, now + DAY), S.expiring_at(2, now + HOUR), S.forever(3)])
    # extend: a later expiry wins, an earlier one is ignored, never stays never.
    client.upsert(
        user,
        [S.expiring_at(1, now + HOUR), S.expiring_at(2, now + DAY), S.expiring_at(3, now + HOUR)],
        Mode.EXTEND,
    )
    assert client.get(user).expires == [now + DAY, now + DAY, 0]
    # extend with 0 makes a finite segment never expire.
    client.upsert(user, [S.forever(1)], "extend")
    assert client.get(user).expires[0] == 0
    # add: seconds onto the current expiry; a new segment gets now + value.
    r = client.upsert(user, [S(2, HOUR), S(4, HOUR), S(3, HOUR)], mode="add")
    assert r.inserted == 1 and r.updated == 2
    g = client.get(user)
    assert g.expires[1] == now + DAY + HOUR
    assert g.expires[2] == 0
    assert now + HOUR <= g.expires[3] <= int(time.time()) + HOUR + 1
    # set: replaces whatever was there, earlier or not.
    client.upsert(user, [S.expiring_at(2, now + HOUR)], Mode.SET)
    assert client.get(user).expires[1] == now + HOUR
    with pytest.raises(InvalidArgument):
        client.upsert(user, [S.forever(1)], mode="replace")


def test_upsert_errors_carry_the_servers_message(client, user):
    with pytest.raises(InvalidArgument) as e:
        client.upsert(user, [S.expiring_at(1, 1000000000)])
    assert "not in the future" in e.value.message
    with pytest.raises(InvalidArgument) as e:
        client.upsert(user, [S.expiring_in(1, 0)])  # a TTL of 0
    assert e.value.message
    with pytest.raises(InvalidArgument) as e:
        client.upsert(user, [S.forever(7), S.forever(7)])
    assert "twice" in e.value.message
    with pytest.raises(LimitExceeded) as e:
        client.upsert(user, [S.forever(i) for i in range(51)])  # max_segments is 50
    assert e.value.message and e.value.op == "upsert"
    with pytest.raises(NotFound):
        client.get(user)  # none of them wrote anything


def test_write_id_is_accepted_and_checked(client, user):
    r = client.upsert(user, [S.forever(1)], write_id=new_write_id())
    assert r.inserted == 1 and r.duplicate is False
    assert client.remove(user, [9], write_id=new_write_id()) == RemoveResult(0)
    assert client.trim(user, write_id=new_write_id()) == TrimResult(0, 1)
    assert client.delete(user, write_id=new_write_id()) == DeleteResult(True)
    for bad in (b"short", bytes(16), "0123456789abcdef"):
        with pytest.raises(InvalidArgument):
            client.delete(user, write_id=bad)  # type: ignore[arg-type]


def test_remove(client, user, profile):
    r = client.remove(user, [10, 10, 999])  # listed twice counts once; absent not at all
    assert r == RemoveResult(removed=1)
    assert client.get(user, projection="ids").ids == [20, 30, 40]
    assert client.remove(user, []) == RemoveResult(0)
    assert client.remove(user, [20, 30, 40]).removed == 3
    with pytest.raises(NotFound):
        client.get(user)  # the last segment took the profile with it
    with pytest.raises(NotFound):
        client.remove(user, [1])


def test_trim(client, user, profile):
    before, after = profile
    assert client.trim(user) == TrimResult(trimmed=0, remaining=4)  # nothing has expired
    # Everything not live two hours from now goes, live or not; never stays.
    r = client.trim(user, before=after + 2 * HOUR)
    assert r == TrimResult(trimmed=2, remaining=2)
    assert client.get(user, projection="ids").ids == [30, 40]
    assert client.trim(user, before=MAX_U32) == TrimResult(1, 1)
    with pytest.raises(NotFound):
        client.trim(user + "-none")


def test_delete(client, user, profile):
    assert client.delete(user) == DeleteResult(deleted=True)
    assert bool(client.delete(user)) is False  # already gone: not NotFound
    with pytest.raises(NotFound):
        client.get(user)


def test_batch_get_results_and_errors_in_place(client, user, profile):
    other = user + "-2"
    client.upsert(other, [S.forever(7)])
    long_user = "x" * 65  # max_key_bytes is 64
    results = client.batch_get([user, "", other, user + "-none", long_user, user], projection="ids")
    assert len(results) == 6
    assert results[0] == GetResult(4, [10, 20, 30, 40])
    assert isinstance(results[1], InvalidArgument) and "users[1]" in results[1].message
    assert results[2] == GetResult(1, [7])
    assert isinstance(results[3], NotFound) and results[3].user == user + "-none"
    assert isinstance(results[4], InvalidArgument) and results[4].message
    assert results[5] == results[0]  # the same user twice: a result each time
    # The options apply to every user.
    r = client.batch_get([user, other], id_from=20, count_only=True)
    assert [x.count for x in r] == [3, 0]
    assert client.batch_get([]) == []


def test_batch_upsert_items_fail_alone(client, user):
    now = int(time.time())
    items = [
        UpsertItem(user + "-a", [S.expiring_in(1, HOUR)]),
        UpsertItem(user + "-b", [S.expiring_at(5, 1000000000)]),  # in the past
        UpsertItem(user + "-c", [S.forever(7), S.forever(7)]),  # an ID twice
        UpsertItem(user + "-d", [S.forever(i) for i in range(51)]),  # over max_segments
        UpsertItem(user + "-a", [S.expiring_at(1, now + DAY)], mode="extend"),  # its own mode
        {"user": user + "-e", "segments": [(1, 0)], "write_id": new_write_id()},  # a mapping
        UpsertItem("", [S.forever(1)]),  # a bad user ID
    ]
    results = client.batch_upsert(items)
    assert results[0] == UpsertResult(1, 0, 0, 1)
    assert isinstance(results[1], InvalidArgument) and "not in the future" in results[1].message
    assert isinstance(results[2], InvalidArgument) and results[2].user == user + "-c"
    assert isinstance(results[3], LimitExceeded) and results[3].message
    assert results[4] == UpsertResult(0, 1, 0, 1)
    assert results[5] == UpsertResult(1, 0, 0, 1)
    assert isinstance(results[6], InvalidArgument)
    assert client.get(user + "-a").expires == [now + DAY]
    for missing in ("-b", "-c", "-d"):
        with pytest.raises(NotFound):
            client.get(user + missing)
    # The batch's mode applies to items without their own.
    r = client.batch_upsert([UpsertItem(user + "-a", [S(1, HOUR)])], mode=Mode.ADD)
    assert r == [UpsertResult(0, 1, 0, 1)]
    assert client.get(user + "-a").expires == [now + DAY + HOUR]
    assert client.batch_upsert([]) == []


def test_client_refuses_what_the_server_would_and_stays_usable(client, user):
    with pytest.raises(LimitExceeded) as e:
        client.batch_get([user] * 21)  # max_batch is 20
    assert "max_batch" in e.value.message and "not sent" in e.value.message
    with pytest.raises(LimitExceeded) as e:
        client.batch_upsert([UpsertItem(user, [S.forever(1)])] * 21)
    with pytest.raises(LimitExceeded) as e:
        client.upsert(user, [S.forever(i, i, i) for i in range(8000)])  # a 100 KB body
    assert "max_frame_bytes of 65536" in e.value.message
    assert client.batch_get([user] * 20)[0].__class__ is NotFound


def test_server_limits_without_hello(server, user):
    """Without hello the client does not know the limits: the server's own answers come."""
    with server.client(hello=False) as c:
        with pytest.raises(LimitExceeded) as e:
            c.batch_get([user] * 21)
        assert e.value.message and "not sent" not in e.value.message
        # A frame over max_frame_bytes: the server answers it, then closes the connection.
        with pytest.raises(LimitExceeded) as e:
            c.call(Op.PING, {"pad": b"x" * 70000})
        assert e.value.message
        # The next call opens a new connection.
        c.ping()


def test_long_user_id_is_invalid(client):
    with pytest.raises(InvalidArgument) as e:
        client.get("x" * 65)
    assert e.value.message
    with pytest.raises(InvalidArgument):
        client.get("")


def test_copy_partition_needs_a_cluster(client):
    with pytest.raises(InvalidArgument) as e:
        client.copy_partition(0)
    assert e.value.message == "copy_partition needs a cluster node that writes through a log"


def test_link_step_and_read_records_need_a_cluster(client, user):
    with pytest.raises(InvalidArgument) as e:
        client.link_step(user, "list", member=user + "-m", max_links=4)
    assert e.value.message == "link_step is node to node, between a cluster's nodes"
    with pytest.raises(InvalidArgument) as e:
        client.read_records([user])
    assert e.value.message == "read_records is node to node, between a cluster's nodes"
    with pytest.raises(LimitExceeded) as e:  # over hello's max_batch (20): not sent
        client.read_records([user] * 21)
    assert "not sent" in e.value.message
    client.ping()


def test_profile_fields(client, user):
    """The four field writes and a get's field options, every value type."""
    now = int(time.time())
    w = client.field_set(
        user,
        [
            segstore.FieldUpdate("country", "FR"),
            segstore.FieldUpdate("score", 0.5, DAY, ttl=True),
            segstore.FieldUpdate("raw", b"\x00\xff"),
            segstore.FieldUpdate("seen", segstore.Time(1_800_000_000)),
        ],
    )
    assert (w.changed, w.count) == (4, 4)
    got = client.get(user, projection="ids", fields=True)
    assert got.count == 0  # a profile of fields alone
    assert set(got.fields) == {"country", "score", "raw", "seen"}
    assert got.fields["country"] == segstore.Field("FR", 0)
    assert got.fields["raw"].value == b"\x00\xff"
    assert got.fields["seen"].value == segstore.Time(1_800_000_000)
    assert got.fields["score"].value == 0.5 and got.fields["score"].expires_at >= now + DAY
    assert client.get(user).fields is None  # none asked: none answered
    assert set(client.get(user, field_prefix="s").fields) == {"score", "seen"}
    assert set(client.get(user, fields=["raw", "nope"]).fields) == {"raw"}

    assert client.field_incr(user, "cap:77", ttl=DAY, cap=2) == segstore.IncrementResult(1)
    assert client.field_incr(user, "cap:77", ttl=DAY, cap=2).value == 2
    capped = client.field_incr(user, "cap:77", ttl=DAY, cap=2)
    assert capped.capped and capped.value == 2
    assert client.field_incr(user, "cap:77", delta=-5).value == -3
    with pytest.raises(InvalidArgument):
        client.field_incr(user, "country")  # holds a str
    m = client.field_max(user, "seen", segstore.Time(1_700_000_000))
    assert m == segstore.FieldMaxResult(segstore.Time(1_800_000_000), replaced=False)
    assert client.field_max(user, "best", 7).replaced
    with pytest.raises(InvalidArgument):
        client.field_max(user, "best", 2.5)  # the field holds an int
    d = client.field_del(user, ["country", "nope"])
    assert (d.changed, d.count) == (1, 5)
    with pytest.raises(NotFound):
        client.field_del(user + "-nobody", ["country"])
    # Refused before sending: a name too long, a bad value, both selections.
    with pytest.raises(InvalidArgument):
        segstore.FieldUpdate("n" * 65, 1)
    with pytest.raises(InvalidArgument):
        segstore.FieldUpdate("n", True)
    with pytest.raises(InvalidArgument):
        GetOptions(fields=True, field_prefix="c")
    # The server's limits, as hello says them: refused, nothing written.
    info = client.hello()
    with pytest.raises(LimitExceeded):
        client.field_set(user, [segstore.FieldUpdate("long", "x" * (info.max_field_bytes + 1))])
    with pytest.raises(LimitExceeded):
        client.field_set(
            user, [segstore.FieldUpdate(f"f{i}", i) for i in range(info.max_fields + 1)]
        )
    assert set(client.get(user, fields=True).fields) == {"score", "raw", "seen", "cap:77", "best"}
    client.ping()


def test_unknown_operation_is_unsupported(client):
    with pytest.raises(segstore.Unsupported) as e:
        client.call(0x7F, {})
    assert e.value.status.name == "Unsupported" and e.value.message
    client.ping()  # the connection stays usable


def test_raw_call_returns_the_body(client, user):
    client.upsert(user, [S.forever(3)])
    assert client.call(Op.GET, {"user": user, "projection": "ids"}, idempotent=True) == {
        "count": 1,
        "ids": [3],
    }
    with pytest.raises(InvalidArgument) as e:
        client.call(Op.GET, {"user": user, "limit": "50"})
    assert "limit" in e.value.message


def test_pipeline(client, user, profile):
    pipe = client.pipeline()
    pipe.get(user, projection="ids").count(user).ping().upsert(user, [S.forever(50)])
    pipe.get(user + "-none").remove(user, [50]).trim(user).batch_get([user], limit=1)
    pipe.stats().delete(user + "-none").batch_upsert([UpsertItem(user + "-x", [(1, 0)])])
    assert len(pipe) == 11
    results = pipe.execute(raise_on_error=False)
    assert results[0] == GetResult(4, [10, 20, 30, 40])
    assert results[1] == CountResult(4)
    assert results[2] is None
    assert results[3].inserted == 1
    assert isinstance(results[4], NotFound)
    assert results[5] == RemoveResult(1)
    assert results[6] == TrimResult(0, 4)
    assert results[7][0].ids == [10]
    assert "server.version" in results[8]
    assert results[9] == DeleteResult(False)
    assert results[10] == [UpsertResult(1, 0, 0, 1)]
    assert len(pipe) == 0
    with pytest.raises(NotFound):
        client.pipeline().ping().get(user + "-none").execute()


def test_long_pipeline_goes_in_windows(client, user):
    """More requests than max_in_flight: sent a window at a time, all answered in order."""
    users = [f"{user}-{i}" for i in range(40)]
    client.batch_upsert([UpsertItem(u, [S.forever(i)]) for i, u in enumerate(users[:20])])
    client.batch_upsert([UpsertItem(u, [S.forever(i + 20)]) for i, u in enumerate(users[20:])])
    pipe = client.pipeline()
    for n in range(1000):
        pipe.get(users[n % 40], projection="ids")
    results = pipe.execute()
    assert [r.ids for r in results] == [[n % 40] for n in range(1000)]


def test_closed_client_reconnects_on_the_next_call(server):
    c = server.client()
    with c:
        c.ping()
    assert not c.connected
    c.ping()
    assert c.connected
    c.close()


def test_from_address_and_repr(server):
    c = segstore.Client.from_address(server.address, timeout=30)
    assert c.address == server.address and "not connected" in repr(c)
    with c:
        assert "connected" in repr(c)
        c.ping()


def test_upsert_replace_attrs(client, user):
    client.upsert(user, [S.forever(1, attr1=5, attr2=6), S.forever(2, attr1=7)])
    # Named segments get exactly the attributes given; segment 2 is not named.
    r = client.upsert(user, [S.forever(1, attr2=9)], replace_attrs=True)
    assert r == UpsertResult(0, 1, 0, 2)
    g = client.get(user)
    assert g.attr1 == [None, 7] and g.attr2 == [9, None]
    items = [UpsertItem(user, [S.forever(2)], replace_attrs=True)]
    assert client.batch_upsert(items) == [UpsertResult(0, 1, 0, 2)]
    assert client.get(user).attr1 is None


def test_expire(client, user):
    from segstore import Condition, ExpireOutcome as O

    now = int(time.time())
    client.upsert(user, [S.expiring_at(1, now + HOUR), S.forever(2), S.expiring_at(3, now + DAY)])
    try:
        r = client.expire(user, [1, 2, 3, 4], now + 2 * HOUR, condition=Condition.GT)
    except segstore.Unsupported:
        pytest.skip("this segstored has no expire (0x25) yet")
    # gt: later than an hour, not than a day; never is later than anything.
    assert r.results == [O.SET, O.UNCHANGED, O.UNCHANGED, O.MISSING] and r.count == 3
    assert client.get(user).expires == [now + 2 * HOUR, 0, now + DAY]
    # HPERSIST: never expire, only for segments that expire.
    r = client.expire(user, [1, 2], 0, condition="xx")
    assert r.results == [O.SET, O.UNCHANGED]
    # A TTL of 0 removes; the answer counts what is left.
    r = client.expire(user, [3], 0, ttl=True)
    assert r.results == [O.REMOVED] and r.count == 2
    assert client.get(user, projection="ids").ids == [1, 2]
    with pytest.raises(NotFound):
        client.expire(user + "-none", [1], 0)
    with pytest.raises(InvalidArgument):
        client.expire(user, [1], 0, condition="sometimes")


# ---- profile bridging: linked users (the shared server's max_links is 4) ----


@pytest.fixture
def group(client, user):
    """A master and one member, both with a profile, linked; returns (master, member).

    The master holds 1 (never expires) and 2 (in an hour); the member holds
    2 (in a day, attr1 5) and 3: the merged view has 1, 2 (the later expiry,
    with its attributes) and 3.
    """
    master, member = user + "-m", user + "-a"
    client.upsert(master, [S.forever(1), S.expiring_in(2, HOUR)])
    client.upsert(member, [S.expiring_in(2, DAY, attr1=5), S.forever(3)])
    assert client.link(member, master) == LinkResult(master, members=1, moved=0)
    return master, member


def test_link_makes_gets_answer_the_merged_view(client, group):
    master, member = group
    now = int(time.time())
    for who in (member, master):
        r = client.get(who)
        assert r.ids == [1, 2, 3] and r.count == 3
        assert r.master == master and r.profiles == 2 and r.merged
        assert now + DAY - 5 <= r.expires[1] <= now + DAY + 5  # the later expiry wins
        assert r.expires[0] == 0 and r.expires[2] == 0
        assert r.attr1 == [None, 5, None]
    assert client.get(member, projection="ids") == GetResult(3, [1, 2, 3], master=master, profiles=2)
    assert client.get(member, count_only=True) == GetResult(3, [], master=master, profiles=2)


def test_get_own_reads_the_users_profile_alone(client, group):
    master, member = group
    r = client.get(member, own=True)
    assert r.ids == [2, 3] and r.master is None and r.profiles == 0 and not r.merged
    assert client.get(master, GetOptions(own=True, projection="ids")) == GetResult(2, [1, 2])
    # A member without a profile of its own: the group's view, but nothing of its own.
    bare = master + "-bare"
    assert client.link(bare, master).members == 2
    assert client.get(bare, projection="ids") == GetResult(3, [1, 2, 3], master=master, profiles=3)
    with pytest.raises(NotFound):
        client.get(bare, own=True)


def test_a_user_in_no_group_is_answered_as_before(client, user, profile):
    r = client.get(user, projection="ids")
    assert r == GetResult(4, [10, 20, 30, 40]) and r.master is None and r.profiles == 0
    assert client.get(user, projection="ids", own=True) == r


def test_batch_get_merged_and_own(client, group):
    master, member = group
    loner = master + "-loner"
    client.upsert(loner, [S.forever(9)])
    users = [member, master, loner, master + "-none"]
    r = client.batch_get(users, projection="ids")
    assert r[0] == GetResult(3, [1, 2, 3], master=master, profiles=2)
    assert r[1] == r[0]
    assert r[2] == GetResult(1, [9]) and r[2].master is None
    assert isinstance(r[3], NotFound) and r[3].user == master + "-none"
    r = client.batch_get(users, projection="ids", own=True)
    assert r[:3] == [GetResult(2, [2, 3]), GetResult(2, [1, 2]), GetResult(1, [9])]
    assert isinstance(r[3], NotFound)


def test_master_of(client, group):
    master, member = group
    assert client.master_of(member) == master
    assert client.master_of(master) == master  # a master is its own
    # The client's NotFound convention, as get's for a user without a profile: raised.
    with pytest.raises(NotFound) as e:
        client.master_of(master + "-none")
    assert e.value.message == "the user is in no group" and e.value.op == "master_of"


def test_links_pages_and_iter_links(client, group):
    master, member = group
    before = int(time.time())
    others = [master + "-b", master + "-c"]
    assert client.link(others[0], master, ttl=HOUR).members == 2
    assert client.link(others[1], member).master == master  # a member's master: no chains
    after = int(time.time()) + 1
    everyone = sorted([member] + others)
    page = client.links(master)
    assert isinstance(page, LinksPage) and page.master == master
    assert page.users == everyone and page.next is None and not page.more
    b = page.links[everyone.index(others[0])]
    assert before + HOUR <= b.expires_at <= after + HOUR and not b.never_expires
    assert b.expires_datetime().timestamp() == b.expires_at
    assert page.links[everyone.index(member)] == LinkedUser(member, 0)
    # Asked through a member, paged two at a time.
    first = client.links(member, limit=2)
    assert first.master == master and first.users == everyone[:2] and first.more
    rest = client.links(member, cursor=first.next, limit=2)
    assert rest.users == everyone[2:] and rest.next is None
    assert [l.user for l in client.iter_links(member, limit=1)] == everyone
    assert list(client.iter_links(master)) == page.links
    with pytest.raises(NotFound):
        client.links(master + "-none")
    with pytest.raises(NotFound):
        list(client.iter_links(master + "-none"))


def test_are_connected(client, group):
    master, member = group
    other = master + "-b"
    client.link(other, master)
    assert client.are_connected(member, other) is True
    assert client.are_connected(master, member) is True
    assert client.are_connected(member, master + "-none") is False
    assert client.are_connected(master + "-none", master + "-none") is True  # the same user
    assert client.connected  # the property still says the connection is open


def test_unlink(client, group):
    master, member = group
    other = master + "-b"
    client.link(other, master)
    assert client.unlink(member) is True
    assert client.unlink(member) is False  # not linked any more
    assert client.get(member, projection="ids") == GetResult(2, [2, 3])  # its profile stays
    with pytest.raises(NotFound):
        client.master_of(member)
    assert client.links(master).users == [other]
    # A master's unlink dissolves its group.
    assert client.unlink(master) is True
    with pytest.raises(NotFound):
        client.master_of(other)
    assert client.get(master, projection="ids") == GetResult(2, [1, 2])
    assert client.unlink(master + "-none") is False


def test_linking_a_master_moves_its_group(client, group, user):
    master, member = group
    other, its_member = user + "-x", user + "-y"
    client.link(its_member, other)
    r = client.link(other, master)
    assert r == LinkResult(master, members=3, moved=1)
    assert client.master_of(its_member) == master
    assert client.links(master).users == sorted([member, other, its_member])


def test_link_errors(client, user):
    with pytest.raises(InvalidArgument) as e:
        client.link(user, user)
    assert isinstance(e.value, ValueError) and e.value.op == "link" and e.value.message
    with pytest.raises(InvalidArgument):
        client.link("", user)
    with pytest.raises(InvalidArgument):
        client.link(user, "x" * 65)  # max_key_bytes is 64
    with pytest.raises(InvalidArgument):
        client.link(user, user + "-m", ttl=-1)  # refused here, not sent
    with pytest.raises(InvalidArgument):
        client.links(user, limit=2**32)
    with pytest.raises(InvalidArgument):
        client.are_connected(user, 7)  # type: ignore[arg-type]


def test_link_past_max_links_is_limit_exceeded(client, user):
    master = user + "-m"
    for i in range(4):  # max_links is 4
        assert client.link(f"{user}-{i}", master).members == i + 1
    with pytest.raises(LimitExceeded) as e:
        client.link(f"{user}-4", master)
    assert e.value.op == "link" and "4" in e.value.message
    assert len(client.links(master).links) == 4  # nothing written
    with pytest.raises(NotFound):
        client.master_of(f"{user}-4")
    # Linking a member again refreshes it; that is no new member.
    assert client.link(f"{user}-0", master, ttl=HOUR).members == 4


def test_link_with_write_id_and_bytes_ids(client, user):
    raw = b"\xff\xfe" + user.encode()  # not UTF-8: comes back as bytes
    r = client.link(user, raw, write_id=new_write_id())
    assert r.master == raw and isinstance(r.master, bytes)
    assert client.master_of(user) == raw
    assert client.links(user.encode()).users == [user]  # UTF-8: comes back as str
    assert client.unlink(user, write_id=new_write_id()) is True
    with pytest.raises(InvalidArgument):
        client.unlink(user, write_id=b"short")


def test_link_expires(client, group):
    master, member = group
    other = master + "-b"
    client.upsert(other, [S.forever(7)])
    client.link(other, master, ttl=1)
    assert client.get(other, projection="ids").ids == [1, 2, 3, 7]
    # Wait for the server's clock to pass the link's expiry: until master_of
    # says the user is in no group (10 s at most).
    deadline = time.monotonic() + 10
    while True:
        try:
            client.master_of(other)
        except NotFound:
            break
        assert time.monotonic() < deadline, "the link did not expire"
        time.sleep(0.05)
    assert client.get(other, projection="ids") == GetResult(1, [7])
    with pytest.raises(NotFound):
        client.master_of(other)
    assert client.links(master).users == [member]


def test_pipeline_of_link_operations(client, group, user):
    """The server may run a pipeline's requests concurrently, so the reads go
    in a pipeline after the one of the writes they depend on."""
    master, member = group
    other, loner, lonely_master = master + "-b", user + "-x", user + "-y"
    writes = client.pipeline().link(other, member, ttl=HOUR).link(loner, lonely_master)
    writes.link(user + "-z", user + "-z")
    r = writes.execute(raise_on_error=False)
    assert r[:2] == [LinkResult(master, 2, 0), LinkResult(lonely_master, 1, 0)]
    assert isinstance(r[2], InvalidArgument)

    pipe = client.pipeline()
    pipe.master_of(other).links(master, limit=1).are_connected(other, member)
    pipe.get(other, projection="ids").get(member, own=True)
    pipe.batch_get([member], projection="ids", own=True).master_of(master + "-none")
    assert len(pipe) == 7
    r = pipe.execute(raise_on_error=False)
    assert r[0] == master
    assert r[1].users == [member] and r[1].more
    assert r[2] is True
    assert r[3] == GetResult(3, [1, 2, 3], master=master, profiles=3)  # other: no segments
    assert r[4].ids == [2, 3] and r[4].master is None
    assert r[5] == [GetResult(2, [2, 3])]
    assert isinstance(r[6], NotFound)

    assert client.pipeline().unlink(other).unlink(loner).unlink(other + "-none").execute() == [
        True,
        True,
        False,
    ]
    assert client.pipeline().are_connected(other, member).execute() == [False]
    with pytest.raises(NotFound):
        client.pipeline().master_of(member).master_of(master + "-none").execute()
