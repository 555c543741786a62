"""A PEP 517 build backend for baton-client with the standard library only.

pip runs it to build the wheel of ./clients/python without a package index:
the wheel holds the baton_client package as it is, and the metadata that
pyproject.toml's [project] table gives.
"""
import base64
import hashlib
import io
import os
import zipfile

try:
    import tomllib
except ImportError:  # before Python 3.11
    raise RuntimeError("baton-client needs Python 3.11 or newer") from None

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "baton_client"


def _project():
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _dist(project):
    return project["name"].replace("-", "_") + "-" + project["version"]


def _metadata(project):
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {project['name']}\n"
        f"Version: {project['version']}\n"
        f"Summary: {project['description']}\n"
        f"Requires-Python: {project['requires-python']}\n"
        f"License: {project['license']}\n"
    )


WHEEL = "Wheel-Version: 1.0\nGenerator: baton-client backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    project = _project()
    info = _dist(project) + ".dist-info"
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    for name, text in (("METADATA", _metadata(project)), ("WHEEL", WHEEL)):
        with open(os.path.join(metadata_directory, info, name), "w") as f:
            f.write(text)
    return info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    project = _project()
    info = _dist(project) + ".dist-info"
    files = {}
    for root, _, names in os.walk(os.path.join(HERE, PACKAGE)):
        for name in sorted(names):
            if name.endswith((".py", ".typed")):
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    files[os.path.relpath(path, HERE).replace(os.sep, "/")] = f.read()
    files[info + "/METADATA"] = _metadata(project).encode()
    files[info + "/WHEEL"] = WHEEL.encode()
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(info + "/RECORD,,")
    files[info + "/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = _dist(project) + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return wheel


def build_sdist(sdist_directory, config_settings=None):
    import tarfile

    project = _project()
    base = _dist(project)
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        info = tarfile.TarInfo(base + "/PKG-INFO")
        data = _metadata(project).encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for entry in ("pyproject.toml", "_build", PACKAGE):
            tar.add(os.path.join(HERE, entry), arcname=base + "/" + entry,
                    filter=lambda ti: None if "__pycache__" in ti.name else ti)
    return name
