"""TrainingInput's config (as the SDK builds it) and fit(inputs) -> InputDataConfig."""

from __future__ import annotations

from pathlib import Path

import pytest

from smlaunch.sdk.errors import ConfigurationError
from smlaunch.sdk.inputs import ShuffleConfig, TrainingInput, channels


def test_default_config_is_the_sdks() -> None:
    assert TrainingInput("s3://b-1/train").config == {
        "DataSource": {
            "S3DataSource": {
                "S3DataType": "S3Prefix",
                "S3Uri": "s3://b-1/train",
                "S3DataDistributionType": "FullyReplicated",
            }
        }
    }


def test_every_field() -> None:
    config = TrainingInput(
        "s3://b-1/m.manifest",
        distribution="ShardedByS3Key",
        compression="Gzip",
        content_type="text/csv",
        record_wrapping="RecordIO",
        s3_data_type="ManifestFile",
        input_mode="Pipe",
        attribute_names=["a"],
        shuffle_config=ShuffleConfig(3),
    ).config
    assert config == {
        "DataSource": {
            "S3DataSource": {
                "S3DataType": "ManifestFile",
                "S3Uri": "s3://b-1/m.manifest",
                "S3DataDistributionType": "ShardedByS3Key",
                "AttributeNames": ["a"],
            }
        },
        "CompressionType": "Gzip",
        "ContentType": "text/csv",
        "RecordWrapperType": "RecordIO",
        "InputMode": "Pipe",
        "ShuffleConfig": {"Seed": 3},
    }


def test_target_attribute_without_distribution_omits_it_like_the_sdk() -> None:
    config = TrainingInput("s3://b-1/x", target_attribute_name="y").config
    assert "S3DataDistributionType" not in config["DataSource"]["S3DataSource"]
    with pytest.raises(ConfigurationError, match="AutoML"):
        channels({"train": TrainingInput("s3://b-1/x", target_attribute_name="y")}, local=False)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("distribution", "Sharded"),
        ("input_mode", "file"),
        ("compression", "gzip"),
        ("s3_data_type", "Prefix"),
    ],
)
def test_bad_enumerations(field: str, value: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        TrainingInput("s3://b-1/x", **{field: value})
    assert info.value.field == field and info.value.value == value and "use one of" in str(info.value)


def test_string_input_is_channel_training() -> None:
    (channel,) = channels("s3://b-1/train", local=False) or []
    assert channel.ChannelName == "training"
    assert channels(None, local=False) is None


@pytest.mark.parametrize("name", ["bad name", "a/b", "", "x" * 65, "ü"])
def test_invalid_channel_names(name: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        channels({name: "s3://b-1/x"}, local=False)
    assert info.value.value == name and "channel name" in info.value.field and info.value.fix


def test_valid_channel_names() -> None:
    names = ["train", "val.1", "a-b_c", "x" * 64]
    assert [c.ChannelName for c in channels({n: "s3://b-1/x" for n in names}, local=False) or []] == names


@pytest.mark.parametrize(
    "uri", ["s3://", "s3:///key", "s3://B/key", "s3://ab/key", "s3://bad_bucket/x", "s3://-bucket/x"]
)
def test_malformed_s3_uris(uri: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        channels({"train": uri}, local=False)
    assert info.value.field == "inputs['train']" and info.value.value == uri
    assert "malformed S3 URI" in str(info.value)


def test_other_schemes_and_file_uris_outside_local() -> None:
    with pytest.raises(ConfigurationError, match='must start with "s3://" or "file://"'):
        channels({"train": "http://x/y"}, local=False)
    with pytest.raises(ConfigurationError, match="only for local runs"):
        channels({"train": "file:///tmp"}, local=False)
    with pytest.raises(ConfigurationError, match="upload the data to S3"):
        channels({"train": "data/train"}, local=False)


def test_local_paths_for_local_sessions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    (channel,) = channels({"train": "data"}, local=True) or []
    assert channel.DataSource.S3DataSource is not None
    assert channel.DataSource.S3DataSource.S3Uri == (tmp_path / "data").as_uri()
    with pytest.raises(ConfigurationError, match="no such local file") as info:
        channels({"train": "missing"}, local=True)
    assert info.value.value == "missing"
    with pytest.raises(ConfigurationError, match="no such file"):
        channels({"train": (tmp_path / "missing").as_uri()}, local=True)
    with pytest.raises(ConfigurationError, match="malformed file URI"):
        channels({"train": "file://host/data"}, local=True)


def test_shuffle_seed_int_and_bad() -> None:
    assert TrainingInput("s3://b-1/x", shuffle_config=5).config["ShuffleConfig"] == {"Seed": 5}
    with pytest.raises(ConfigurationError, match="shuffle_config"):
        TrainingInput("s3://b-1/x", shuffle_config="5")  # type: ignore[arg-type]
