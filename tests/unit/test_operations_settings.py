"""What `make ui` runs with: sensor interval, batch size for UI backfills, the generated dagster.yaml."""

from __future__ import annotations

import logging
import os
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from dagster import DagsterInstance

from assets.factory import build_work_groups
from domain.language.declaration import UseCase
from pipeline_defs.definitions import build_definitions
from pipeline_defs.runtime.dagster_home import ensure_dagster_home
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_use_cases
from sensors.discovery_sensor import run_size


def test_sensor_interval_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PIPELINE_SENSOR_INTERVAL_SECONDS", raising=False)
    assert Settings.from_env().sensor_interval_seconds == 1  # the daemon then looks every second
    monkeypatch.setenv("PIPELINE_SENSOR_INTERVAL_SECONDS", "5")
    defs = build_definitions(Settings.from_env())
    discovery_sensors = [sensor for sensor in defs.sensors if sensor.name.endswith("_discovery")]
    assert discovery_sensors and {sensor.minimum_interval_seconds for sensor in discovery_sensors} == {5}


@pytest.mark.parametrize("value", ["0", "-3", "soon", "1.5"])
def test_a_bad_sensor_interval_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("PIPELINE_SENSOR_INTERVAL_SECONDS", value)
    with pytest.raises(
        ValueError, match=f"PIPELINE_SENSOR_INTERVAL_SECONDS must be a positive integer, not '{value}'"
    ):
        Settings.from_env()


def test_batch_size_override_also_batches_ui_backfills(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPELINE_BATCH_SIZE", "3")
    for item in build_use_cases(Settings.from_env()):
        assert item.batch_size == 3
        assert item.asset.backfill_policy.max_partitions_per_run == 3, item.use_case.name


def test_runs_on_a_model_server_hold_at_least_250_postings_unless_the_batch_size_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the daemon path a run's start (a new process) took a third of a 100-posting run's server time
    (docs/results-log.md); script use cases run 500 postings a run, their work being cheaper still."""
    monkeypatch.delenv("PIPELINE_BATCH_SIZE", raising=False)
    monkeypatch.setenv("PIPELINE_LLM_BACKEND", "embedded")
    declared = {item.use_case.name: item.batch_size for item in build_use_cases(Settings.from_env())}
    # the skills tagger is a CPU script (no model to share a run with): 500 postings a run anywhere
    assert declared == {"posting_summary": 25, "posting_skills": 500, "skill_entities": 500}

    monkeypatch.setenv("PIPELINE_LLM_BACKEND", "ollama")
    on_ollama = build_use_cases(Settings.from_env())
    assert {item.use_case.name: item.batch_size for item in on_ollama} == {
        "posting_summary": 250,
        "posting_skills": 500,
        "skill_entities": 500,
    }
    assert {item.asset.backfill_policy.max_partitions_per_run for item in on_ollama} == {250, 500}
    assert sorted(group.batch_size for group in build_work_groups(on_ollama)) == [250, 500, 500]

    monkeypatch.setenv("PIPELINE_BATCH_SIZE", "40")
    assert {item.batch_size for item in build_use_cases(Settings.from_env())} == {40}


def test_generated_dagster_yaml_limits_llm_steps_and_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "unused"))
    settings = Settings.from_env().changed(dagster_home=tmp_path / "home", dagster_postgres_url=None)
    config = yaml.safe_load((ensure_dagster_home(settings) / "dagster.yaml").read_text())
    assert config["nux"] == {"enabled": False}  # no sign-up pop-up over a team's UI
    assert config["telemetry"] == {"enabled": False}
    with DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 1
        assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs == 4
        assert instance.event_log_storage.supports_global_concurrency_limits  # SQLite can enforce pools
        # slots held by a run that died are freed once the run is marked failed
        assert instance.run_monitoring_enabled
        assert instance.run_monitoring_settings["free_slots_after_run_end_seconds"] == 60


def test_on_model_servers_the_run_queue_limits_runs_per_host_and_script_runs_get_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "unused"))
    monkeypatch.setenv(
        "PIPELINE_LLM_HOSTS", "http://a:11434 parallel=4; http://b:11434 parallel=2 models=m:1"
    )
    monkeypatch.setenv("PIPELINE_RUNS_PER_HOST", "3")
    monkeypatch.setenv("PIPELINE_SCRIPT_RUNS", "2")
    settings = Settings.from_env().changed(dagster_home=tmp_path / "home", dagster_postgres_url=None)
    assert settings.llm_backend == "ollama" and [h.parallel for h in settings.resolved_hosts()] == [4, 2]
    ensure_dagster_home(settings)
    with DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        config = instance.get_concurrency_config()
        # 3 runs per host on 2 hosts, and 2 runs each for the two script groups (tagger, resolution)
        assert config.run_queue_config.max_concurrent_runs == 2 * 3 + 2 * 2
        assert config.pool_config.default_pool_limit == 10  # never the binding limit
        [limit] = config.run_queue_config.tag_concurrency_limits
        assert limit == {"key": "pipeline/llm_host", "value": {"applyLimitPerUniqueValue": True}, "limit": 3}
        assert instance.run_coordinator.dequeue_interval_seconds == 1
        # several hosts' runs launched together, not one launch (1-2.5 s) after another, but no more
        # at once than the cores that load their code (each launch is a process importing it)
        coordinator = instance.run_coordinator
        assert coordinator.dequeue_use_threads
        assert coordinator.dequeue_num_workers == min(4, os.cpu_count() or 1)
        # sensors ticked side by side: one slow tick does not hold up the others' look
        assert instance.get_settings("sensors") == {"use_threads": True, "num_workers": 4}


def test_in_flight_requests_default_to_the_servers_parallel_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline_defs.wiring import build_llm_resource

    monkeypatch.setenv("OLLAMA_HOST", "http://gpu:11434")
    monkeypatch.delenv("PIPELINE_LLM_HOSTS", raising=False)
    monkeypatch.delenv("OLLAMA_NUM_PARALLEL", raising=False)
    assert build_llm_resource(Settings.from_env()).in_flight_limit == 4  # Ollama's own default
    monkeypatch.setenv("OLLAMA_NUM_PARALLEL", "6")
    llm = build_llm_resource(Settings.from_env())
    assert llm.in_flight_limit == 6 and llm.hosts == ["http://gpu:11434 parallel=6"]
    monkeypatch.setenv("PIPELINE_LLM_HOSTS", "http://a:1 parallel=2; http://b:1")
    assert [h.parallel for h in Settings.from_env().resolved_hosts()] == [2, 6]
    monkeypatch.setenv("PIPELINE_LLM_HOSTS", "gpu-a:11434")
    with pytest.raises(ValueError, match="must start with its URL"):
        Settings.from_env()
    monkeypatch.setenv("PIPELINE_LLM_HOSTS", "http://a:1 slots=2")
    with pytest.raises(ValueError, match="is not `parallel=N`"):
        Settings.from_env()


def test_a_dead_run_gives_its_llm_pool_slot_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sensor marks a run with expired claims failed; monitoring (as configured) frees its slot."""
    from dagster import DagsterRunStatus
    from dagster._core.test_utils import create_run_for_test
    from dagster._daemon.monitoring import concurrency as slot_monitoring

    from sensors.run_liveness import fail_dead_runs

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "unused"))
    settings = Settings.from_env().changed(dagster_home=tmp_path / "home", dagster_postgres_url=None)
    ensure_dagster_home(settings)
    with DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        storage = instance.event_log_storage
        storage.initialize_concurrency_limit_to_default("llm")
        dead = create_run_for_test(
            instance, job_name="gemma3_270m_batch_job", status=DagsterRunStatus.STARTED
        )
        assert storage.claim_concurrency_slot("llm", dead.run_id, "posting_summary").is_claimed
        assert fail_dead_runs(instance, [dead.run_id]) == [dead.run_id]
        assert instance.get_run_by_id(dead.run_id).status == DagsterRunStatus.FAILURE
        later = slot_monitoring.get_current_datetime() + timedelta(seconds=61)
        monkeypatch.setattr(slot_monitoring, "get_current_datetime", lambda: later)
        list(
            slot_monitoring.execute_concurrency_slots_iteration(
                SimpleNamespace(instance=instance), logging.getLogger()
            )
        )
        assert storage.get_concurrency_info("llm").active_slot_count == 0
        assert storage.claim_concurrency_slot("llm", "next-run", "posting_summary").is_claimed


def test_runs_are_cut_evenly_over_the_hosts() -> None:
    """900 postings in runs of 250 on three hosts: three runs, then one host alone with the fourth."""
    assert run_size(1000, 250, hosts=1) == 250
    assert run_size(900, 250, hosts=3) == 150  # six runs, two a host
    assert run_size(300, 250, hosts=3) == 100
    assert run_size(90, 250, hosts=3) == 30
    assert run_size(10, 250, hosts=3) == 25  # below the floor a run's start costs more than it spreads
    assert run_size(0, 250, hosts=3) == 250


def test_a_referee_model_on_a_server_makes_skill_entities_call_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """PIPELINE_LINK_REFEREE_MODEL on Ollama turns on linker+llm; the embedded default stays the linker."""
    for name in ("PIPELINE_BATCH_SIZE", "PIPELINE_LINK_STYLE", "PIPELINE_LINK_REFEREE_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIPELINE_LLM_BACKEND", "embedded")

    def skill_entities() -> UseCase:
        return next(
            i.use_case for i in build_use_cases(Settings.from_env()) if i.use_case.name == "skill_entities"
        )

    assert skill_entities().is_script
    monkeypatch.setenv("PIPELINE_LINK_REFEREE_MODEL", "qwen2.5:7b")
    assert skill_entities().is_script  # on the embedded model, only when asked for by name
    monkeypatch.setenv("PIPELINE_LLM_BACKEND", "ollama")
    assert skill_entities().model == "qwen2.5:7b"
    # groups run in the order made: refereed by the summary's model, skill_entities comes after the
    # tagger it reads, not in that model's first group, which runs before the tagger
    monkeypatch.setenv("PIPELINE_LLM_BACKEND", "embedded")
    monkeypatch.setenv("PIPELINE_LINK_STYLE", "linker+llm")
    monkeypatch.delenv("PIPELINE_LINK_REFEREE_MODEL")
    assert skill_entities().model == "gemma3:270m"
    groups = [
        [m.use_case.name for m in g.members] for g in build_work_groups(build_use_cases(Settings.from_env()))
    ]
    assert groups.index(["skill_entities"]) > groups.index(["posting_skills"])
    monkeypatch.setenv("PIPELINE_LINK_STYLE", "linker")
    assert skill_entities().is_script
    monkeypatch.setenv("PIPELINE_LINK_STYLE", "llm")
    with pytest.raises(
        ValueError, match="PIPELINE_LINK_STYLE must be one of linker, linker\\+llm, not 'llm'"
    ):
        Settings.from_env()


def test_the_code_servers_calls_get_three_minutes_unless_the_user_says_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run launched while the embedded model keeps the CPU busy must not 'fail to start' after
    Dagster's default 60 s; a value the user exported is kept."""
    monkeypatch.delenv("DAGSTER_GRPC_TIMEOUT_SECONDS", raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "unused"))
    settings = Settings.from_env().changed(dagster_home=tmp_path / "home", dagster_postgres_url=None)
    ensure_dagster_home(settings)
    assert os.environ["DAGSTER_GRPC_TIMEOUT_SECONDS"] == "180"
    monkeypatch.setenv("DAGSTER_GRPC_TIMEOUT_SECONDS", "30")
    ensure_dagster_home(settings)
    assert os.environ["DAGSTER_GRPC_TIMEOUT_SECONDS"] == "30"
