"""The ConfigMap watch loop, in process: the real `kubernetes` client against the fake API
server. Precedence (node over group over default), deletions falling back, 410 Gone and
re-listing, the API server going away and coming back, and the reports on the Node."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from enforcer.cluster import STATUS_ANNOTATION, candidate_names
from enforcer.cluster.client import make_api_client
from enforcer.cluster.config_source import ClusterConfig, ClusterConfigSource, Outcome
from tests.support.fake_apiserver import FakeAPIServer

NS = "resource-enforcer"
NODE = "node-1"
NODE_CM = f"resource-enforcer-config.node.{NODE}"
GROUP_CM = "resource-enforcer-config.group.fast"
DEFAULT_CM = "resource-enforcer-config.default"


def cfg(policy: str) -> dict[str, str]:
    return {"config.yaml": f"policy: {{name: {policy}}}\n"}


class Recorder:
    """Stands for the enforcer: records each choice; refuses texts containing 'bad'."""

    def __init__(self) -> None:
        self.choices: list[ClusterConfig | None] = []
        self.in_force = "builtin"
        self.lock = threading.Lock()

    def __call__(self, chosen: ClusterConfig | None) -> Outcome:
        with self.lock:
            self.choices.append(chosen)
            if chosen is not None and chosen.text is not None and "bad" in chosen.text:
                return Outcome(False, ["policy.name: bad"], self.in_force)
            self.in_force = chosen.source if chosen is not None else "builtin"
            return Outcome(True, [], self.in_force)

    def names(self) -> list[str | None]:
        with self.lock:
            return [c.name if c is not None else None for c in self.choices]


def wait_for(predicate: Callable[[], object], timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        time.sleep(0.02)


@pytest.fixture
def api() -> Iterator[FakeAPIServer]:
    server = FakeAPIServer().start()
    server.put_node(NODE, {"resource-enforcer.dev/config-group": "fast"})
    yield server
    server.stop()


@pytest.fixture
def start_source(
    api: FakeAPIServer, tmp_path: Path
) -> Iterator[Callable[..., tuple[ClusterConfigSource, Recorder]]]:
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    sources: list[ClusterConfigSource] = []

    def start(**kwargs: object) -> tuple[ClusterConfigSource, Recorder]:
        recorder = Recorder()
        source = ClusterConfigSource(
            api_client=lambda: make_api_client(kubeconfig),
            namespace=NS,
            node=NODE,
            apply=recorder,
            watch_seconds=kwargs.pop("watch_seconds", 30),  # type: ignore[arg-type]
            backoff_max=0.3,
        )
        source.BACKOFF_MIN = 0.05
        source.start()
        sources.append(source)
        return source, recorder

    yield start
    for source in sources:
        source.stop()
        assert not source.thread.is_alive()


def status(api: FakeAPIServer, **expect: object) -> dict[str, object]:
    """The node's status annotation, once it has the ``expect``ed values (it is written just
    after the outcome is known)."""

    def current() -> dict[str, object]:
        raw = api.annotation(NODE, STATUS_ANNOTATION)
        return json.loads(raw) if raw else {}

    wait_for(lambda: current() and expect.items() <= current().items(), what=f"status {expect}")
    return current()


def test_candidate_names() -> None:
    assert candidate_names("n1", "g") == [
        "resource-enforcer-config.node.n1",
        "resource-enforcer-config.group.g",
        "resource-enforcer-config.default",
    ]
    assert candidate_names("n1", None) == [
        "resource-enforcer-config.node.n1",
        "resource-enforcer-config.default",
    ]


def test_precedence_node_over_group_over_default(
    api: FakeAPIServer, start_source: Callable[..., tuple[ClusterConfigSource, Recorder]]
) -> None:
    api.put_configmap(NS, DEFAULT_CM, cfg("none"))
    api.put_configmap(NS, "unrelated", {"x": "y"})
    source, rec = start_source()
    wait_for(lambda: rec.names() == [DEFAULT_CM], what="default chosen")
    status(api, source=f"configmap/{NS}/{DEFAULT_CM}")

    api.put_configmap(NS, GROUP_CM, cfg("static"))
    wait_for(lambda: rec.names()[-1:] == [GROUP_CM], what="group chosen")
    api.put_configmap(NS, NODE_CM, cfg("topology-aware"))
    wait_for(lambda: rec.names()[-1:] == [NODE_CM], what="node chosen")
    # Changes to a ConfigMap that does not win change nothing.
    api.put_configmap(NS, GROUP_CM, cfg("none"))
    api.put_configmap(NS, "unrelated", {"x": "z"})
    time.sleep(0.3)
    assert rec.names() == [DEFAULT_CM, GROUP_CM, NODE_CM]

    # The node's own deleted: back to the group's, in its latest version.
    api.delete_configmap(NS, NODE_CM)
    wait_for(lambda: rec.names()[-1:] == [GROUP_CM], what="fallback to group")
    assert rec.choices[-1].text == cfg("none")["config.yaml"]  # type: ignore[union-attr]
    api.delete_configmap(NS, GROUP_CM)
    wait_for(lambda: rec.names()[-1:] == [DEFAULT_CM], what="fallback to default")
    api.delete_configmap(NS, DEFAULT_CM)
    wait_for(lambda: rec.names()[-1:] == [None], what="none left")
    status(api, source="builtin", applied=True, resourceVersion=None)
    assert source.lists == 1  # all of it from one list and one watch


def test_modification_is_applied_and_reported(
    api: FakeAPIServer, start_source: Callable[..., tuple[ClusterConfigSource, Recorder]]
) -> None:
    api.put_configmap(NS, DEFAULT_CM, cfg("none"))
    _, rec = start_source()
    wait_for(lambda: len(rec.choices) == 1)
    cm = api.put_configmap(NS, DEFAULT_CM, cfg("static"))
    wait_for(lambda: len(rec.choices) == 2)
    assert rec.choices[-1].resource_version == cm["metadata"]["resourceVersion"]  # type: ignore[union-attr]
    st = status(api, resourceVersion=cm["metadata"]["resourceVersion"])
    assert set(st) == {"source", "resourceVersion", "applied", "errors", "inForce", "time"}
    assert st["applied"] is True and st["errors"] == []
    assert st["time"].endswith("Z")  # type: ignore[union-attr]


def test_refusal_annotates_the_node_and_writes_an_event(
    api: FakeAPIServer, start_source: Callable[..., tuple[ClusterConfigSource, Recorder]]
) -> None:
    api.put_configmap(NS, DEFAULT_CM, cfg("none"))
    _, rec = start_source()
    wait_for(lambda: len(rec.choices) == 1)
    bad = api.put_configmap(NS, NODE_CM, {"config.yaml": "policy: {name: bad}\n"})
    wait_for(lambda: api.events, what="an Event")
    st = status(api, applied=False)
    assert st["applied"] is False and st["errors"] == ["policy.name: bad"]
    assert st["source"] == f"configmap/{NS}/{NODE_CM}"
    assert st["inForce"] == f"configmap/{NS}/{DEFAULT_CM}"
    (event,) = api.events
    assert event["type"] == "Warning" and event["reason"] == "ConfigRefused"
    assert event["involvedObject"]["kind"] == "ConfigMap"
    assert event["involvedObject"]["name"] == NODE_CM
    assert event["involvedObject"]["uid"] == bad["metadata"]["uid"]
    assert event["metadata"]["namespace"] == NS
    assert NODE in event["message"] and "policy.name: bad" in event["message"]
    assert event["source"] == {"component": "resource-enforcer", "host": NODE}


def test_reports_are_retried_until_the_api_server_takes_them(
    api: FakeAPIServer, start_source: Callable[..., tuple[ClusterConfigSource, Recorder]]
) -> None:
    api.fail_patches = 2
    api.put_configmap(NS, DEFAULT_CM, cfg("none"))
    _, rec = start_source()
    wait_for(lambda: api.annotation(NODE, STATUS_ANNOTATION), what="the annotation")
    assert api.fail_patches == 0 and len(rec.choices) == 1


def test_410_gone_lists_again(
    api: FakeAPIServer, start_source: Callable[..., tuple[ClusterConfigSource, Recorder]]
) -> None:
    api.put_configmap(NS, DEFAULT_CM, cfg("none"))
    source, rec = start_source()
    wait_for(lambda: len(rec.choices) == 1)
    wait_for(lambda: any("watch=" in p for _, p in api.requests), what="a watch")
    # The history is compacted and the watch cut; meanwhile the node's own ConfigMap appears.
    api.expire()
    api.put_configmap(NS, NODE_CM, cfg("static"))
    wait_for(lambda: rec.names()[-1:] == [NODE_CM], what="node chosen after re-list")
    assert source.lists == 2
    watches = [p for m, p in api.requests if "watch=" in p]
    assert all("allowWatchBookmarks=true" in p for p in watches)


def test_bookmarks_move_the_resource_version(
    api: FakeAPIServer, start_source: Callable[..., tuple[ClusterConfigSource, Recorder]]
) -> None:
    api.put_configmap(NS, DEFAULT_CM, cfg("none"))
    source, rec = start_source()
    wait_for(lambda: len(rec.choices) == 1)
    listed_at = source.resource_version
    api.put_node("other-node")  # moves the global resourceVersion, no ConfigMap event
    wait_for(lambda: source.resource_version != listed_at, what="a bookmark")
    assert int(source.resource_version or 0) == api.rv


def test_api_server_away_and_back(
    api: FakeAPIServer, start_source: Callable[..., tuple[ClusterConfigSource, Recorder]]
) -> None:
    api.put_configmap(NS, DEFAULT_CM, cfg("none"))
    source, rec = start_source()
    wait_for(lambda: len(rec.choices) == 1)
    api.stop()
    time.sleep(0.5)  # a few failed reconnects
    # Changed while the client could not see it (as if another API server instance took it).
    api.put_configmap(NS, NODE_CM, cfg("static"))
    api.start()
    wait_for(lambda: rec.names()[-1:] == [NODE_CM], what="the change seen after the return")
    assert source.lists == 1  # resumed from its resourceVersion: no re-list needed
    status(api, source=f"configmap/{NS}/{NODE_CM}")


def test_api_server_down_at_start(
    api: FakeAPIServer, start_source: Callable[..., tuple[ClusterConfigSource, Recorder]]
) -> None:
    api.stop()
    api.put_configmap(NS, GROUP_CM, cfg("static"))
    _, rec = start_source()
    time.sleep(0.4)
    assert rec.choices == []  # nothing decided without the API server
    api.start()
    wait_for(lambda: rec.names() == [GROUP_CM], what="group chosen once the API server is up")


def test_group_label_change_is_picked_up(
    api: FakeAPIServer, start_source: Callable[..., tuple[ClusterConfigSource, Recorder]]
) -> None:
    api.put_configmap(NS, GROUP_CM, cfg("static"))
    api.put_configmap(NS, "resource-enforcer-config.group.slow", cfg("none"))
    api.put_configmap(NS, DEFAULT_CM, cfg("none"))
    source, rec = start_source(watch_seconds=1)  # the label is read again at each watch
    wait_for(lambda: rec.names() == [GROUP_CM])
    api.put_node(NODE, {"resource-enforcer.dev/config-group": "slow"})
    wait_for(lambda: rec.names()[-1:] == ["resource-enforcer-config.group.slow"], timeout=5)
    api.put_node(NODE, {})
    wait_for(lambda: rec.names()[-1:] == [DEFAULT_CM], timeout=5)
    assert source.group is None


def test_missing_key_is_a_refusal_handled_by_apply(
    api: FakeAPIServer, start_source: Callable[..., tuple[ClusterConfigSource, Recorder]]
) -> None:
    api.put_configmap(NS, DEFAULT_CM, {"other.yaml": "x"})
    _, rec = start_source()
    wait_for(lambda: len(rec.choices) == 1)
    assert rec.choices[0] is not None and rec.choices[0].text is None


def test_wrong_credentials_are_errors_not_crashes(api: FakeAPIServer, tmp_path: Path) -> None:
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    Path(kubeconfig).write_text(Path(kubeconfig).read_text().replace("fake-apiserver", "wrong"))
    errors: list[int] = []
    rec = Recorder()
    source = ClusterConfigSource(
        api_client=lambda: make_api_client(kubeconfig),
        namespace=NS,
        node=NODE,
        apply=rec,
        on_error=lambda: errors.append(1),
        backoff_max=0.1,
    )
    source.BACKOFF_MIN = 0.02
    source.start()
    try:
        wait_for(lambda: len(errors) >= 3, what="retries")
        assert rec.choices == []
    finally:
        source.stop()
