"""Which configuration is in force, by precedence, and the one way to change it.

At start: the cluster's last word as stored, the --config file, built-in defaults
(``starting_configs``); afterwards a ConfigMap of the cluster, the file, built-in defaults
(``ConfigManager``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable
from dataclasses import dataclass

from enforcer.cluster import CONFIG_KEY, LastGoodStore, StoredConfig
from enforcer.cluster.config_source import ClusterConfig, Outcome
from enforcer.configuration import load_config, parse_config
from enforcer.controllers.errors import ApplyError
from enforcer.engine import Enforcer
from enforcer.metrics import EnforcerMetrics
from enforcer.options import RunOptions
from enforcer.worker import EngineWorker
from resource_contract.config import Config, ConfigError, config_data

log = logging.getLogger("enforcer")

BUILTIN = "builtin"


def config_from_text(text: str, source: str) -> Config:
    """A ConfigMap's config.yaml, validated exactly as the --config file is (same bounds)."""
    return parse_config(config_data(text, source))


@dataclass
class Start:
    """The configuration the enforcer starts with, and where it came from."""

    config: Config
    source: str  # configmap/<ns>/<name> (stored), file:<path>, builtin
    text: str | None = None  # the stored ConfigMap's text


def starting_configs(options: RunOptions, last_good: LastGoodStore | None) -> list[Start]:
    """In order of preference: the cluster's last word (stored), the --config file, built-in
    defaults. A refused file is fatal, as it has always been; a refused stored one is not."""
    starts: list[Start] = []
    stored = last_good.load() if last_good is not None else None
    if stored is not None:
        try:
            config = config_from_text(stored.text, stored.source)
            starts.append(Start(config, stored.source, stored.text))
        except ConfigError as exc:
            log.error("stored configuration from %s refused: %s", stored.source, exc)
    if options.config:
        try:
            starts.append(Start(load_config(options.config), f"file:{options.config}"))
        except ConfigError:
            if not starts:
                raise
            log.warning(
                "--config %s is refused; starting from the stored configuration", options.config
            )
    else:
        starts.append(Start(Config(), BUILTIN))
    return starts


class ConfigManager:
    """The configuration in force, where it came from, and the one way to change it: validated
    (`parse_config`), then `Enforcer.reconfigure` on the enforcer's worker thread. A refused
    configuration changes nothing and the last good one stays in force.

    Precedence: a ConfigMap of the cluster (node, group, default) once the API server has
    answered; before that the one stored from the cluster last time; then the --config file;
    then built-in defaults (policy none). While a ConfigMap (or the stored one) is in force,
    changes to the --config file wait: they apply when the cluster has no ConfigMap for the
    node.
    """

    def __init__(
        self,
        service: EngineWorker,
        enforcer: Enforcer,
        *,
        file: str | None,
        last_good: LastGoodStore | None,
        source: str,
        text: str | None,
    ) -> None:
        self.service = service
        self.enforcer = enforcer
        self.file = file
        self.last_good = last_good
        self.source = source
        self.text = text
        self.loop = asyncio.get_running_loop()
        self.closed = False  # set when stopping or handing over
        self._lock = asyncio.Lock()  # one change at a time: file and cluster may race

    @property
    def metrics(self) -> EnforcerMetrics:
        return self.enforcer.metrics

    @property
    def cluster_in_force(self) -> bool:
        return self.source.startswith("configmap/")

    def _local(self) -> str:
        return f"file:{self.file}" if self.file else BUILTIN

    async def _reconfigure(self, config: Config, source: str) -> list[str]:
        """Applies ``config``; the problems when it was refused or failed (empty: applied)."""
        try:
            moved = await self.service.run(self.enforcer.reconfigure, config)
        except ConfigError as exc:
            for problem in exc.problems:
                log.error("configuration %s refused, keeping %s: %s", source, self.source, problem)
            self.metrics.reloads.labels("refused").inc()
            return list(exc.problems)
        except ApplyError as exc:
            log.error("configuration %s could not be applied: %s", source, exc)
            self.metrics.reloads.labels("failed").inc()
            self.metrics.controller_errors.labels("rdt").inc()
            return [str(exc)]
        except Exception as exc:  # reported like a refusal: a lost apply is never retried
            log.exception("configuration %s could not be applied", source)
            self.metrics.reloads.labels("failed").inc()
            return [f"could not be applied: {exc}"]
        self.metrics.reloads.labels("applied").inc()
        log.info("configuration %s applied (%d containers moved)", source, len(moved))
        return []

    def _refused(self, source: str, problems: list[str]) -> list[str]:
        for problem in problems:
            log.error("configuration %s refused, keeping %s: %s", source, self.source, problem)
        self.metrics.reloads.labels("refused").inc()
        return problems

    async def reload_file(self) -> bool:
        """The --config file changed (or SIGHUP)."""
        assert self.file is not None
        async with self._lock:
            if self.cluster_in_force:
                log.info("%s changed; not applied while %s is in force", self.file, self.source)
                return False
            source = f"file:{self.file}"
            try:
                config = load_config(self.file)
            except ConfigError as exc:
                self._refused(source, exc.problems)
                return False
            if await self._reconfigure(config, source):
                return False
            self.source, self.text = source, None
            return True

    async def apply_cluster(self, chosen: ClusterConfig | None) -> Outcome:
        async with self._lock:
            if chosen is None:
                # The API server says there is no ConfigMap for this node: back to local.
                if self.last_good is not None:
                    self.last_good.clear()
                source = self._local()
                if self.source == source:
                    return Outcome(True, [], source)
                try:
                    config = load_config(self.file) if self.file else Config()
                except ConfigError as exc:
                    return Outcome(False, self._refused(source, exc.problems), self.source)
                log.info("no ConfigMap for this node any more; falling back to %s", source)
            else:
                source = chosen.source
                if chosen.text is None:
                    problem = f"{chosen.source}: has no key {CONFIG_KEY}"
                    return Outcome(False, self._refused(source, [problem]), self.source)
                if self.cluster_in_force and chosen.text == self.text:
                    # Same configuration (e.g. the stored one, confirmed): nothing to redo.
                    self.source = source
                    self._store(chosen)
                    return Outcome(True, [], source)
                try:
                    config = config_from_text(chosen.text, source)
                except ConfigError as exc:
                    return Outcome(False, self._refused(source, exc.problems), self.source)
            problems = await self._reconfigure(config, source)
            if problems:
                return Outcome(False, problems, self.source)
            self.source = source
            self.text = chosen.text if chosen is not None else None
            if chosen is not None:
                self._store(chosen)
            return Outcome(True, [], source)

    def _store(self, chosen: ClusterConfig) -> None:
        if self.last_good is None or chosen.text is None:
            return
        try:
            self.last_good.save(StoredConfig(chosen.source, chosen.resource_version, chosen.text))
        except OSError as exc:
            log.error("cannot keep the configuration in %s: %s", self.last_good.path, exc)

    def apply_from_thread(
        self, chosen: ClusterConfig | None, stopped: Callable[[], bool]
    ) -> Outcome:
        """For the cluster thread: applies on the event loop and waits for the outcome. Never
        once this enforcer is stopping or has handed over: the state is not its own then."""
        if self.closed or stopped():
            raise RuntimeError("stopping")
        future = asyncio.run_coroutine_threadsafe(self.apply_cluster(chosen), self.loop)
        while True:
            try:
                return future.result(timeout=0.5)
            except concurrent.futures.TimeoutError:
                if stopped():
                    future.cancel()
                    raise RuntimeError("stopping") from None
