#!/usr/bin/env python3
"""The pieces of `.ci/release` that make its files the same bytes on every machine.

  release_files.py version PACKAGE...      reads `cargo metadata` on stdin; prints the packages'
                                           one version, or fails when they differ
  release_files.py zip IN.zip OUT.zip      rewrites a zip: entries sorted by name, each dated
                                           SOURCE_DATE_EPOCH, mode 0755 or 0644, deflated at
                                           level 9, no extra fields or comments
  release_files.py sbom IN.json ROOT OUT   rewrites a CycloneDX JSON: its timestamp is
                                           SOURCE_DATE_EPOCH, the path ROOT is /cfn-once, and its
                                           serial number a UUID derived from the rest; prints
                                           the number of components to stderr

Only the standard library: it runs under any python3, before the venv exists.
"""

import datetime
import hashlib
import json
import os
import sys
import uuid
import zipfile

# Zip dates are DOS dates, which start in 1980.
ZIP_EPOCH_MIN = 315532800


def source_date_epoch():
    value = os.environ.get("SOURCE_DATE_EPOCH")
    if not value or not value.isdigit():
        sys.exit("release_files: SOURCE_DATE_EPOCH must be the commit's time in seconds (git log -1 --format=%ct)")
    return int(value)


def version(packages):
    metadata = json.load(sys.stdin)
    found = {p["name"]: p["version"] for p in metadata["packages"] if p["name"] in packages}
    missing = [name for name in packages if name not in found]
    if missing:
        sys.exit(f"release_files: the workspace has no package {', '.join(missing)}")
    versions = sorted(set(found.values()))
    if len(versions) != 1:
        sys.exit(f"release_files: the released packages disagree on their version ({found}); give them the workspace's")
    print(versions[0])


def rezip(source, destination):
    epoch = max(source_date_epoch(), ZIP_EPOCH_MIN)
    date_time = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).timetuple()[:6]
    with zipfile.ZipFile(source) as original:
        entries = sorted(original.infolist(), key=lambda info: info.filename)
        with zipfile.ZipFile(destination, "w") as rewritten:
            for entry in entries:
                info = zipfile.ZipInfo(entry.filename, date_time=date_time)
                info.create_system = 3  # Unix, so that the mode below is read
                executable = (entry.external_attr >> 16) & 0o111
                if entry.is_dir():
                    info.external_attr = (0o40755 << 16) | 0x10
                    rewritten.writestr(info, b"")
                    continue
                info.external_attr = (0o100755 if executable else 0o100644) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                rewritten.writestr(info, original.read(entry), compresslevel=9)


def sbom(source, root, destination):
    epoch = source_date_epoch()
    with open(source) as f:
        text = f.read()
    # Paths of the copy the SBOM was made from, as paths and as file:// URLs.
    root = os.path.abspath(root).rstrip("/")
    text = text.replace(root, "/cfn-once")
    document = json.loads(text)
    metadata = document.setdefault("metadata", {})
    metadata["timestamp"] = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    document.pop("serialNumber", None)
    body = json.dumps(document, sort_keys=True).encode()
    serial = uuid.uuid5(uuid.NAMESPACE_URL, "cfn-once-sbom:" + hashlib.sha256(body).hexdigest())
    document = {"bomFormat": document.pop("bomFormat"), "specVersion": document.pop("specVersion"),
                "serialNumber": f"urn:uuid:{serial}", **document}
    with open(destination, "w") as f:
        json.dump(document, f, indent=2)
        f.write("\n")
    print(f"{os.path.basename(destination)}: {len(document.get('components', []))} components", file=sys.stderr)


def main(argv):
    if len(argv) >= 2 and argv[0] == "version":
        version(argv[1:])
    elif len(argv) == 3 and argv[0] == "zip":
        rezip(argv[1], argv[2])
    elif len(argv) == 4 and argv[0] == "sbom":
        sbom(argv[1], argv[2], argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
