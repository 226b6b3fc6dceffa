"""Per-host /opt/ml trees: config files as the platform writes them, channel views, sharding."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from smlaunch import contract
from smlaunch.sdk.backends.emulated import layout
from smlaunch.sdk.request.spec import TrainingJobSpec


def _spec(**overrides: object) -> TrainingJobSpec:
    request: dict[str, object] = {
        "TrainingJobName": "layout-job",
        "AlgorithmSpecification": {"TrainingImage": "img", "TrainingInputMode": "File"},
        "RoleArn": "arn:aws:iam::000000000000:role/r",
        "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
        "ResourceConfig": {"InstanceType": "ml.p3.16xlarge", "InstanceCount": 3},
        "HyperParameters": {
            "epochs": "10",
            "lr": "3e-05",
            "raw": "not json",
            "sagemaker_program": '"train.py"',
        },
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "ContentType": "text/csv",
                "DataSource": {
                    "S3DataSource": {"S3Uri": "s3://bucket/train", "S3DataDistributionType": "ShardedByS3Key"}
                },
            },
            {
                "ChannelName": "val",
                "InputMode": "File",
                "RecordWrapperType": "RecordIO",
                "DataSource": {"S3DataSource": {"S3Uri": "file:///data/val"}},
            },
        ],
        "CheckpointConfig": {"S3Uri": "s3://bucket/ckpt"},
    }
    request.update(overrides)
    return TrainingJobSpec.model_validate(request)


def test_host_names_are_sorted_like_the_platform() -> None:
    assert layout.host_names(3) == ["algo-1", "algo-2", "algo-3"]
    assert layout.host_names(11)[:3] == ["algo-1", "algo-10", "algo-11"]


def test_config_files_match_the_platform(tmp_path: Path) -> None:
    spec = _spec()
    hosts = layout.host_names(3)
    paths = layout.write_host_tree(spec, tmp_path / "algo-2", "algo-2", hosts)
    for directory in paths.directories():
        assert directory.is_dir()
    assert json.loads(paths.hyperparameters_file.read_text()) == spec.HyperParameters  # verbatim strings
    assert json.loads(paths.resource_config_file.read_text()) == {
        "current_host": "algo-2",
        "current_instance_type": "ml.p3.16xlarge",
        "current_group_name": "homogeneousCluster",
        "hosts": ["algo-1", "algo-2", "algo-3"],
        "instance_groups": [
            {
                "instance_group_name": "homogeneousCluster",
                "instance_type": "ml.p3.16xlarge",
                "hosts": ["algo-1", "algo-2", "algo-3"],
            }
        ],
        "network_interface_name": "eth0",
    }
    assert json.loads(paths.input_data_config_file.read_text()) == {
        "train": {
            "TrainingInputMode": "File",
            "S3DistributionType": "ShardedByS3Key",
            "RecordWrapperType": "None",
            "ContentType": "text/csv",
        },
        "val": {
            "TrainingInputMode": "File",
            "S3DistributionType": "FullyReplicated",
            "RecordWrapperType": "RecordIO",
        },
    }
    assert json.loads(paths.checkpoint_config_file.read_text()) == {
        "LocalPath": str(paths.checkpoints_dir),
        "S3Uri": "s3://bucket/ckpt",
    }


def test_no_checkpoint_config_without_checkpoints(tmp_path: Path) -> None:
    paths = layout.write_host_tree(_spec(CheckpointConfig=None), tmp_path, "algo-1", ["algo-1"])
    assert not paths.checkpoint_config_file.exists()


# kind: (spec field, its S3 key, the tree's default directory, config file, directory function,
#        default directory below the tree)
CONTAINER_DIRS: dict[str, tuple[str, str, str, str, Callable[..., Path | None], str]] = {
    "checkpoints": (
        "CheckpointConfig",
        "S3Uri",
        "checkpoints_dir",
        "checkpoint_config_file",
        layout.checkpoint_dir,
        "checkpoints",
    ),
    "tensorboard": (
        "TensorBoardOutputConfig",
        "S3OutputPath",
        "tensorboard_dir",
        "tensorboard_config_file",
        layout.tensorboard_dir,
        "output/tensorboard",
    ),
}


@pytest.mark.parametrize("kind", CONTAINER_DIRS)
def test_container_local_path_maps_into_each_host_tree(tmp_path: Path, kind: str) -> None:
    field, s3_key, default_attr, config_attr, dir_of, default_rel = CONTAINER_DIRS[kind]

    def spec(local_path: str | None = None) -> TrainingJobSpec:
        config = {s3_key: "s3://bucket/x", **({"LocalPath": local_path} if local_path else {})}
        return _spec(**{field: config})

    unset = _spec(**{field: None})
    paths = layout.write_host_tree(unset, tmp_path / "none", "algo-1", ["algo-1"])
    assert not getattr(paths, config_attr).exists() and dir_of(unset, paths) is None
    paths = layout.write_host_tree(spec(), tmp_path / "a", "algo-1", ["algo-1"])
    default_dir = getattr(paths, default_attr)
    assert dir_of(spec(), paths) == default_dir == tmp_path / "a" / default_rel and default_dir.is_dir()
    assert json.loads(getattr(paths, config_attr).read_text()) == {
        "LocalPath": str(default_dir),
        s3_key: "s3://bucket/x",
    }
    custom = spec("/opt/ml/logs/run-1/")
    paths = layout.write_host_tree(custom, tmp_path / "b", "algo-1", ["algo-1"])
    host_dir = tmp_path / "b" / "logs" / "run-1"
    assert dir_of(custom, paths) == host_dir and host_dir.is_dir()
    assert json.loads(getattr(paths, config_attr).read_text())["LocalPath"] == str(host_dir)
    # Outside /opt/ml (containers mount it there): the tree's default directory holds it.
    assert dir_of(spec("/elsewhere/x"), paths) == getattr(paths, default_attr)


def test_container_paths_below_opt_ml() -> None:
    assert layout.below_opt_ml("/opt/ml/../etc/tb") is None and layout.below_opt_ml("/opt/ml") is None
    assert layout.below_opt_ml("/opt/mlx/tb") is None


def test_link_view_isolates_structure_and_detects_in_place_writes(tmp_path: Path) -> None:
    source = tmp_path / "data"
    (source / "a" / "empty").mkdir(parents=True)
    (source / "a" / "x.csv").write_text("x")
    (source / "y.csv").write_text("y")
    view = tmp_path / "view"
    linked = layout.link_view(source, view)
    assert sorted(p.name for p in linked) == ["x.csv", "y.csv"]
    assert (view / "a").is_dir() and not (view / "a").is_symlink()
    assert (view / "a" / "empty").is_dir()
    assert (view / "a" / "x.csv").read_text() == "x"
    prints = layout.fingerprint_files(linked)
    (view / "y.csv").unlink()
    (view / "a" / "x.csv").rename(view / "moved.csv")
    (view / "new.csv").write_text("new")
    assert (source / "y.csv").read_text() == "y" and (source / "a" / "x.csv").exists()
    assert not (source / "new.csv").exists()
    assert layout.changed_files(prints) == []
    with open(view / "moved.csv", "a") as handle:  # writes through the link reach the original...
        handle.write("!")
    assert layout.changed_files(prints) == [str((source / "a" / "x.csv").resolve())]  # ...and are caught


def test_single_file_channel(tmp_path: Path) -> None:
    single = tmp_path / "one.csv"
    single.write_text("1")
    layout.link_view(single, tmp_path / "v1")
    assert (tmp_path / "v1" / "one.csv").read_text() == "1"


def test_host_environment_and_gpu_counts(tmp_path: Path) -> None:
    spec = _spec(Environment={"USER_VAR": "1"})
    env = layout.host_environment(spec, tmp_path, {"algo-1": "127.0.0.1"}, 29500, 8, 120.0, 0)
    assert env["USER_VAR"] == "1"
    assert env[contract.BASE_DIR_ENV] == str(tmp_path)
    assert env[contract.TRAINING_JOB_NAME_ENV] == "layout-job"
    assert json.loads(env[contract.SMLAUNCH_HOST_ADDRESSES]) == {"algo-1": "127.0.0.1"}
    assert env[contract.SMLAUNCH_MASTER_PORT] == "29500"
    assert env[contract.SMLAUNCH_PROCESSES_PER_HOST] == "8"
    assert env[contract.SMLAUNCH_NUM_GPUS] == "0"
    assert env[contract.SMLAUNCH_STOP_GRACE_SECONDS] == "120"
    assert contract.TRAINING_MODULE_ENV not in env  # "img" is no framework image


def test_a_framework_image_names_its_training_module_to_the_hosts(tmp_path: Path) -> None:
    image = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.1.0-cpu-py310"
    spec = _spec(AlgorithmSpecification={"TrainingImage": image, "TrainingInputMode": "File"})
    env = layout.host_environment(spec, tmp_path, {"algo-1": "127.0.0.1"}, 29500, 1, 1.0, 0)
    assert env[contract.TRAINING_MODULE_ENV] == contract.PYTORCH_TRAINING_MODULE
    # The request's own environment wins, as a variable set on the job overrides the image's.
    spec = spec.model_copy(update={"Environment": {contract.TRAINING_MODULE_ENV: "mine.training:main"}})
    env = layout.host_environment(spec, tmp_path, {"algo-1": "127.0.0.1"}, 29500, 1, 1.0, 0)
    assert env[contract.TRAINING_MODULE_ENV] == "mine.training:main"
