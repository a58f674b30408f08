#!/usr/bin/env python3
"""Generates apiserver/src/protobuf/omitempty.rs: the protobuf fields whose zero value the
API server drops when it decodes a message, because upstream never shows it in JSON.

Why: gogo-protobuf writes every non-pointer scalar field, zero or not (`hostNetwork` is
always on the wire), while a pointer field is written only when set (`runAsNonRoot: false`
is on the wire only if the client said so). Upstream decodes into Go structs and serves
JSON through `encoding/json`, where a non-pointer field tagged `omitempty` disappears when
zero. The `.proto` files do not say which fields are pointers; the Go types do. This script
reads them and lists, per message, the tags of non-pointer bool/number fields tagged
`omitempty`; the decoder drops such a field when it is zero, and keeps every other zero.

Usage (from the workspace root), with git directories of the upstream repositories (the
tool library's `fetch` writes them as /work/.mirror/<owner>+<name>/repo):

    python3 hack/gen-protobuf-omitempty.py \\
        --api /work/.mirror/kubernetes+api/repo \\
        --apimachinery /work/.mirror/kubernetes+apimachinery/repo \\
        --apiextensions /work/.mirror/kubernetes+apiextensions-apiserver/repo \\
        --aggregator /work/.mirror/kubernetes+kube-aggregator/repo \\
        > apiserver/src/protobuf/omitempty.rs

Only messages and fields present in apiserver/src/protobuf/schema.rs, with a bool or
number kind there, are written.
"""

import argparse
import re
import subprocess
import sys

SCALARS = {"bool", "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32",
           "uint64", "float32", "float64"}

STRUCT_RE = re.compile(r"^type (\w+) struct \{\s*$")
NAMED_SCALAR_RE = re.compile(r"^type (\w+) (\w+)\s*(//.*)?$")
FIELD_RE = re.compile(r"^\t(\w+)\s+(\S+)\s+`([^`]*)`")
JSON_TAG_RE = re.compile(r'json:"([^"]*)"')
PROTO_TAG_RE = re.compile(r'protobuf:"\w+,(\d+),')


def git(repo, *args):
    return subprocess.run(["git", "--git-dir", repo, *args], check=True, capture_output=True,
                          text=True).stdout


def go_files(repo, prefix):
    """Non-generated, non-test Go files under `prefix`, by directory."""
    by_dir = {}
    for path in git(repo, "ls-tree", "-r", "--name-only", "HEAD", *([prefix] if prefix else [])).splitlines():
        name = path.rsplit("/", 1)[-1]
        if not name.endswith(".go") or name.endswith("_test.go") or "generated" in name:
            continue
        by_dir.setdefault(path.rsplit("/", 1)[0], []).append(path)
    return by_dir


def omit_zero_fields(repo, files):
    """{struct: [tag]} of one Go package's non-pointer scalar `omitempty` fields."""
    sources = [git(repo, "show", f"HEAD:{f}") for f in files]
    scalars = set(SCALARS)
    for src in sources:
        for line in src.splitlines():
            m = NAMED_SCALAR_RE.match(line)
            if m and m.group(2) in SCALARS:
                scalars.add(m.group(1))
    out = {}
    for src in sources:
        struct = None
        for line in src.splitlines():
            if struct is None:
                m = STRUCT_RE.match(line)
                if m:
                    struct = m.group(1)
                continue
            if line.startswith("}"):
                struct = None
                continue
            m = FIELD_RE.match(line)
            if not m or m.group(2) not in scalars:
                continue
            json_tag, proto_tag = JSON_TAG_RE.search(m.group(3)), PROTO_TAG_RE.search(m.group(3))
            if not json_tag or not proto_tag or "omitempty" not in json_tag.group(1).split(",")[1:]:
                continue
            out.setdefault(struct, []).append(int(proto_tag.group(1)))
    return out


def schema_scalars(path):
    """{message: {tag: kind}} of the bool/number fields in schema.rs."""
    out, current = {}, None
    for line in open(path):
        m = re.match(r'\s*Message \{ name: "([^"]+)"', line)
        if m:
            current = out.setdefault(m.group(1), {})
            continue
        m = re.match(r"\s*f\((\d+), \"[^\"]*\", (Bool|I32|I64|F64), One\)", line)
        if m and current is not None:
            current[int(m.group(1))] = m.group(2)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", required=True)
    ap.add_argument("--apimachinery", required=True)
    ap.add_argument("--apiextensions", required=True)
    ap.add_argument("--aggregator", required=True)
    ap.add_argument("--schema", default="apiserver/src/protobuf/schema.rs")
    args = ap.parse_args()

    # (repository, directory prefix, proto package of a directory)
    sources = [
        (args.api, "", lambda d: "k8s.io.api." + d.replace("/", ".")),
        (args.apimachinery, "pkg/apis", lambda d: "k8s.io.apimachinery." + d.replace("/", ".")),
        (args.apiextensions, "pkg/apis/apiextensions",
         lambda d: "k8s.io.apiextensions_apiserver." + d.replace("/", ".")),
        (args.aggregator, "pkg/apis/apiregistration",
         lambda d: "k8s.io.kube_aggregator." + d.replace("/", ".")),
    ]
    schema = schema_scalars(args.schema)
    rows = []
    for repo, prefix, package in sources:
        for directory, files in sorted(go_files(repo, prefix).items()):
            for struct, tags in omit_zero_fields(repo, files).items():
                name = f"{package(directory)}.{struct}"
                known = schema.get(name)
                if known is None:
                    continue
                kept = sorted(t for t in tags if t in known)
                if kept:
                    rows.append((name, kept))
    rows.sort()
    print("//! The protobuf fields whose zero value upstream never shows in JSON: non-pointer")
    print("//! bool and number fields tagged `omitempty` in the Go types, which gogo-protobuf")
    print("//! writes even when zero. The decoder drops them when zero ([`super::message`]).")
    print("//!")
    print("//! Generated by hack/gen-protobuf-omitempty.py from the Go types of kubernetes/api,")
    print("//! apimachinery, apiextensions-apiserver and kube-aggregator; do not edit.")
    print()
    print(f"/// {len(rows)} messages, sorted by name; each with its fields' tags, sorted.")
    print("#[rustfmt::skip]")
    print("pub static OMIT_ZERO: &[(&str, &[u32])] = &[")
    for name, tags in rows:
        print(f'    ("{name}", &[{", ".join(str(t) for t in tags)}]),')
    print("];")
    print(f"generated {len(rows)} messages", file=sys.stderr)


if __name__ == "__main__":
    main()
