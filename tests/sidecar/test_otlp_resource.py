"""The push's resource, named as NeMo Gym 0.7.0 on nemo-lens 0.1.0 names a job's (the facts each
assertion rests on are listed in docs/operations.md, "Telemetry conventions")."""

from __future__ import annotations

import socket

from sidecar.export.otlp import nemo_run_id, resource_attributes, service_name

#: What ``gym eval submit`` puts in a job's environment (NeMo Gym 0.7.0's driver_telemetry_env).
GYM_EVAL_SUBMIT = {
    "NEMO_GYM_OTEL_ENABLED": "1",
    "NEMO_GYM_OTEL_RUN_ID": "job-123",
    "NEMO_GYM_OTEL_SPAN_GROUPS": "default,verify",
    "NEMO_GYM_OTEL_LOGS_ENABLED": "1",
    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318",
    "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://localhost:4317",
}
SLURM = {
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NAME": "eval",
    "SLURM_NODELIST": "gpu[01-02]",
    "SLURM_NNODES": "2",
    "SLURM_NTASKS": "16",
    "SLURM_CLUSTER_NAME": "c1",
    "SLURM_PROCID": "3",
    "SLURM_NODEID": "1",
    "SLURM_JOB_NODELIST": "ignored",  # nemo-lens reads SLURM_NODELIST
}


class TestRunId:
    def test_nemo_gym_order(self) -> None:
        assert nemo_run_id({**SLURM, "NEMO_GYM_OTEL_RUN_ID": "job-7"}) == "job-7"
        assert nemo_run_id(SLURM) == "4242"
        generated = nemo_run_id({})
        assert len(generated) == 12 and int(generated, 16) >= 0
        assert nemo_run_id({"NEMO_GYM_OTEL_RUN_ID": "  "}) == generated  # blank is unset

    def test_values_from_the_environment_are_capped(self) -> None:
        assert nemo_run_id({"NEMO_GYM_OTEL_RUN_ID": "x" * 10_000}) == "x" * 256


class TestServiceName:
    def test_nemo_gym_per_server_style(self) -> None:
        assert service_name({}) == "nemo-gym/rollout-sidecar"
        assert service_name({"OTEL_SERVICE_NAME": "my-eval"}) == "my-eval/rollout-sidecar"
        assert service_name({"OTEL_SERVICE_NAME": "my-eval/rollout-sidecar"}) == "my-eval/rollout-sidecar"
        off = {"OTEL_SERVICE_NAME": "my-eval", "NEMO_GYM_OTEL_SERVICE_NAME_PER_SERVER": "0"}
        assert service_name(off) == "my-eval"


class TestResourceAttributes:
    def test_a_gym_eval_submit_job_under_slurm(self) -> None:
        attributes = resource_attributes({**GYM_EVAL_SUBMIT, **SLURM})
        host = socket.gethostname()
        assert {k: v for k, v in attributes.items() if k != "service.version"} == {
            "service.name": "nemo-gym/rollout-sidecar",
            "service.instance.id": f"job-123-rollout-sidecar-{host}",
            "nemo.run.id": "job-123",
            "host.name": host,
            "slurm.job.id": "4242",
            "slurm.job.name": "eval",
            "slurm.nodelist": "gpu[01-02]",
            "slurm.nnodes": "2",
            "slurm.ntasks": "16",
            "slurm.cluster.name": "c1",
            "slurm.procid": "3",
            "slurm.nodeid": "1",
        }

    def test_no_slurm_attributes_outside_slurm(self) -> None:
        attributes = resource_attributes({"SLURM_PROCID": "0"})  # no job id: not a Slurm job
        assert not [key for key in attributes if key.startswith("slurm.")]
        assert "rollout_sidecar.run_id" not in attributes  # the sidecar's run id is per data point
