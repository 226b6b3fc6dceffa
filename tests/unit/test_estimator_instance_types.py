"""Instance types through the estimator: every botocore type reaches SageMaker, local runs need
the topology, Trainium's ranks per host are its NeuronCores."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from smlaunch import LocalSession, PyTorch
from smlaunch.sdk.backends.emulated.backend import LocalBackend
from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.request import catalog
from tests.unit.test_estimator import ROLE, FakeSageMakerSession, config_error, remote

NEURON_IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training-neuronx:2.1.2-neuronx-py310"


def test_sagemaker_accepts_every_training_type_botocore_lists(src: Path) -> None:
    botocore_session = pytest.importorskip("botocore.session")
    model = botocore_session.get_session().get_service_model("sagemaker")
    for name in model.shape_for("TrainingInstanceType").enum:
        image = NEURON_IMAGE if name.startswith("ml.trn") else None
        estimator = remote(src, instance_type=name, image_uri=image)
        assert estimator.instance.known, name
    spec = remote(
        src,
        instance_type="ml.g6e.12xlarge",
        instance_count=2,
        distribution={"torch_distributed": {"enabled": True}},
    ).plan()
    assert spec.ResourceConfig.InstanceType == "ml.g6e.12xlarge"


def test_a_type_newer_than_the_catalog_goes_to_sagemaker_with_a_warning(
    src: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="smlaunch.sdk.estimator"):
        estimator = remote(
            src,
            instance_type="ml.g6e.96xlarge",
            instance_count=2,
            distribution={"torch_distributed": {"enabled": True}},
        )
    assert "ml.g6e.96xlarge" in caplog.text and "not in smlaunch's instance catalog" in caplog.text
    assert "ml.g6e." in caplog.text  # suggestions within the family
    spec = estimator.plan()
    assert spec.ResourceConfig.InstanceType == "ml.g6e.96xlarge"
    assert spec.AlgorithmSpecification.TrainingImage.endswith("-gpu-py310")  # by family letter, as the SDK


def test_a_malformed_type_is_refused_with_suggestions_from_its_family(src: Path) -> None:
    err = config_error(lambda: remote(src, instance_type="ml.g6e.12xlarg"))
    assert err.field == "instance_type" and "'ml.g6e.12xlarge'" in str(err) and "ml.g6." not in str(err)


def test_local_runs_refuse_a_type_without_topology(src: Path, tmp_path: Path) -> None:
    session = LocalSession(root=tmp_path / "jobs")
    args = dict(
        entry_point="train.py",
        source_dir=str(src),
        framework_version="2.1.0",
        py_version="py310",
        instance_count=1,
        sagemaker_session=session,
    )
    err = config_error(lambda: PyTorch(instance_type="ml.g6e.96xlarge", **args))
    assert "topology" in str(err) and "SageMaker" in err.fix
    err = config_error(lambda: PyTorch(instance_type="ml.g7.12xlarge", **args))
    assert "processes_per_host" in err.fix
    pinned = LocalSession(root=tmp_path / "jobs", processes_per_host=2)
    assert PyTorch(instance_type="ml.g7.12xlarge", **{**args, "sagemaker_session": pinned}).instance.is_gpu


def test_torch_distributed_on_trainium_runs_a_rank_per_neuron_core(src: Path, tmp_path: Path) -> None:
    session = LocalSession(root=tmp_path / "jobs")
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(src),
        framework_version="2.1.0",
        py_version="py310",
        instance_type="ml.trn1.32xlarge",
        instance_count=2,
        distribution={"torch_distributed": {"enabled": True}},
        sagemaker_session=session,
    )
    spec = estimator.plan()
    assert spec.HyperParameters["sagemaker_torch_distributed_enabled"] == "true"
    backend = session.backend()
    assert isinstance(backend, LocalBackend)
    neuron_cores = catalog.lookup("ml.trn1.32xlarge").neuron_cores
    assert backend.settings(spec).processes_per_host == neuron_cores == 32
    spec_trn2 = PyTorch(
        entry_point="train.py",
        source_dir=str(src),
        framework_version="2.1.0",
        py_version="py310",
        instance_type="ml.trn2.48xlarge",
        instance_count=1,
        distribution={"torch_distributed": {"enabled": True}},
        sagemaker_session=session,
    ).plan()
    assert backend.settings(spec_trn2).processes_per_host == 64


def test_trainium_runs_torch_distributed_only_and_needs_a_neuron_image(src: Path) -> None:
    err = config_error(
        lambda: remote(
            src,
            instance_type="ml.trn1.32xlarge",
            image_uri=NEURON_IMAGE,
            distribution={"mpi": {"enabled": True}},
        )
    )
    assert err.field == "distribution" and "torch_distributed" in err.fix
    err = config_error(lambda: remote(src, instance_type="ml.trn1.32xlarge"))
    assert err.field == "image_uri" and "neuronx" in err.fix
    spec = remote(
        src,
        instance_type="ml.trn1.32xlarge",
        image_uri=NEURON_IMAGE,
        distribution={"torch_distributed": {"enabled": True}},
    ).plan()
    assert spec.ProfilerConfig is not None and spec.ProfilerConfig.DisableProfiler


def test_unknown_sagemaker_type_skips_the_accelerator_checks(src: Path) -> None:
    with pytest.raises(ConfigurationError, match="GPU instance types"):
        remote(src, instance_type="ml.c5.xlarge", distribution={"torch_distributed": {"enabled": True}})
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(src),
        framework_version="2.1.0",
        py_version="py310",
        instance_type="ml.c9.xlarge",
        instance_count=1,
        role=ROLE,
        distribution={"torch_distributed": {"enabled": True}},
        sagemaker_session=FakeSageMakerSession(),
    )
    assert not estimator.instance.known
