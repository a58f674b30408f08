#!/usr/bin/env python3
"""Generates apiserver/src/protobuf/schema.rs, the message table behind the apiserver's
Kubernetes protobuf codec (`application/vnd.kubernetes.protobuf`).

Usage (from the workspace root, after `cargo fetch` so both crates' sources are on disk):

    python3 hack/gen-protobuf-schema.py > apiserver/src/protobuf/schema.rs

    --k8s-pb DIR        the k8s-pb 0.9 source (default: ~/.cargo/registry/src/*/k8s-pb-0.9.*/src)
    --k8s-openapi DIR   k8s-openapi 0.29's v1_33 source
                        (default: ~/.cargo/registry/src/*/k8s-openapi-0.29.*/src/v1_33)

Sources of truth:

- Message layouts (field tags, scalar types, cardinality, message references) come from
  k8s-pb's prost-generated structs: `#[prost(TYPE, optional|repeated, tag = "N")]` and
  `#[prost(btree_map = "K, V", tag = "N")]` attributes, with `super::...::Type` paths. The
  module path is the proto package (`api/apps/v1` -> `k8s.io.api.apps.v1`).
- prost renames things: message names lose acronyms (`PodIP` -> `PodIp`, `JSON` -> `Json`)
  and field names become snake_case (`podIPs` -> `pod_i_ps`, `$ref` -> `r#ref`). The exact
  upstream names come from k8s-openapi, whose struct names are the Go names and whose serde
  code maps JSON keys to fields (`"podIP" => Field::Key_pod_ip,`). Names are matched after
  normalizing both sides (lowercase, alphanumerics only): first within the same type (or
  the same type in another version of its group), then across all types, else the
  snake_case name is turned into lowerCamelCase with Kubernetes' initialisms (`podUID`).
- Embedded Go structs (`LocalObjectReference `json:",inline"``) are proto fields named after
  their type whose JSON keys sit in the parent; they are detected where k8s-openapi has the
  parent type (its JSON keys include the embedded type's instead of the field's), else by
  the field being named after its type (listed on stderr; NOT_INLINE holds exceptions).
- API groups: a fixed table from package directory to group name, checked against the
  `const GROUP` of both crates' `Resource` impls. A message is a kind when it has a
  `metadata` field of type ObjectMeta/ListMeta (minus templates such as PodTemplateSpec) or
  when either crate has a `Resource` impl for it.

Output: `MESSAGES` (sorted by name, for binary search) and `KINDS` ((apiVersion, kind) ->
message, sorted). The types they use live in apiserver/src/protobuf/mod.rs.
"""

import argparse
import glob
import os
import re
import sys
from collections import Counter, defaultdict

PACKAGE_PREFIX = "k8s.io."

# Package directory (without the version) -> API group. The core group is "".
GROUPS = {
    "api/admission": "admission.k8s.io",
    "api/admissionregistration": "admissionregistration.k8s.io",
    "api/apidiscovery": "apidiscovery.k8s.io",
    "api/apiserverinternal": "internal.apiserver.k8s.io",
    "api/apps": "apps",
    "api/authentication": "authentication.k8s.io",
    "api/authorization": "authorization.k8s.io",
    "api/autoscaling": "autoscaling",
    "api/batch": "batch",
    "api/certificates": "certificates.k8s.io",
    "api/coordination": "coordination.k8s.io",
    "api/core": "",
    "api/discovery": "discovery.k8s.io",
    "api/events": "events.k8s.io",
    "api/extensions": "extensions",
    "api/flowcontrol": "flowcontrol.apiserver.k8s.io",
    "api/imagepolicy": "imagepolicy.k8s.io",
    "api/networking": "networking.k8s.io",
    "api/node": "node.k8s.io",
    "api/policy": "policy",
    "api/rbac": "rbac.authorization.k8s.io",
    "api/resource": "resource.k8s.io",
    "api/scheduling": "scheduling.k8s.io",
    "api/storage": "storage.k8s.io",
    "api/storagemigration": "storagemigration.k8s.io",
    "apiextensions_apiserver/pkg/apis/apiextensions": "apiextensions.k8s.io",
    "apimachinery/pkg/apis/meta": "meta.k8s.io",
    "kube_aggregator/pkg/apis/apiregistration": "apiregistration.k8s.io",
    "metrics/pkg/apis/custom_metrics": "custom.metrics.k8s.io",
    "metrics/pkg/apis/external_metrics": "external.metrics.k8s.io",
    "metrics/pkg/apis/metrics": "metrics.k8s.io",
}

META = "k8s.io.apimachinery.pkg.apis.meta.v1."
APIEXT = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions."

# Messages whose JSON form is not the generic object of their fields (see mod.rs `Special`).
SPECIAL = {
    META + "Time": "Time",
    META + "MicroTime": "MicroTime",
    META + "Duration": "Duration",
    META + "FieldsV1": "FieldsV1",
    META + "Verbs": "StringArray",
    "k8s.io.apimachinery.pkg.api.resource.Quantity": "Quantity",
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": "IntOrString",
    "k8s.io.apimachinery.pkg.runtime.RawExtension": "RawExtension",
}
for v in ("v1", "v1beta1"):
    SPECIAL[APIEXT + v + ".JSON"] = "Json"
    SPECIAL[APIEXT + v + ".JSONSchemaPropsOrArray"] = "SchemaOrArray"
    SPECIAL[APIEXT + v + ".JSONSchemaPropsOrBool"] = "SchemaOrBool"
    SPECIAL[APIEXT + v + ".JSONSchemaPropsOrStringArray"] = "SchemaOrStringArray"
# `ExtraValue` (authentication, authorization, certificates) is a named []string.
EXTRA_VALUE = "ExtraValue"

# Fields named after their type that Go does not embed (types k8s-openapi lacks).
NOT_INLINE = {
    ("PreferAvoidPodsEntry", "podsignature"),
    ("Unknown", "typemeta"),
    ("CustomResourceConversion", "webhookclientconfig"),  # apiextensions v1beta1
}

SCALARS = {
    "string": "Str",
    "bool": "Bool",
    "int32": "I32",
    "int64": "I64",
    "uint32": "U32",
    "uint64": "U64",
    "sint32": "S32",
    "sint64": "S64",
    "double": "F64",
    "float": "F32",
    "bytes": "Bytes",
    "enumeration": "I32",
}


def default_dir(pattern):
    hits = sorted(glob.glob(os.path.expanduser(pattern)))
    return hits[-1] if hits else None


def norm(name):
    """Both `pod_i_ps` and `podIPs` become `podips`; `r#ref` and `$ref` become `ref`."""
    if name.startswith("r#"):
        name = name[2:]
    return re.sub(r"[^a-z0-9]", "", name.lower())


# Initialisms Kubernetes spells in capitals inside JSON names (`podUID`, `desiredAPIVersion`).
INITIALISMS = {"api", "cidr", "cpu", "dns", "http", "id", "ip", "json", "tls", "uid", "url", "uuid"}


def lower_camel(snake):
    """`desired_api_version` -> `desiredAPIVersion`: the last resort for names k8s-openapi
    does not know (types newer than v1_33, options types)."""
    parts = [p for p in snake.split("_") if p]
    if not parts:
        return snake
    return parts[0] + "".join(
        p.upper() if p in INITIALISMS else p[:1].upper() + p[1:] for p in parts[1:])


def split_top(s, sep=","):
    """Splits `s` at `sep` outside angle brackets."""
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        if ch == sep and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [p.strip() for p in out]


def strip_wrappers(ty):
    """`::core::option::Option<Box<X>>` -> `X`; `Vec<X>` -> `X`; `BTreeMap<K, V>` -> `V`."""
    ty = re.sub(r"\s+", "", ty)
    while True:
        m = re.match(r"^(?:::)?(?:[a-z_]+::)*(Option|Vec|Box|BTreeMap)<(.*)>$", ty)
        if not m:
            return ty
        inner = m.group(2).rstrip(",")  # rustfmt leaves a trailing comma in wrapped generics
        if m.group(1) == "BTreeMap":
            inner = split_top(inner)[1]
        ty = inner


def resolve(module, ty):
    """Resolves a Rust type path used in `module` (a list of path parts) to a proto name."""
    parts = ty.split("::")
    if len(parts) == 1:
        return module, parts[0]
    base = list(module)
    i = 0
    while i < len(parts) and parts[i] == "super":
        base.pop()
        i += 1
    if i == 0:
        raise ValueError(f"unexpected type path {ty} in {'/'.join(module)}")
    return base + parts[i:-1], parts[-1]


def struct_end(text, start):
    """Index of the `}` closing the struct whose `{` is at `start`: `{}` or a `}` alone on a
    line (doc comments may hold unbalanced braces, so braces are not counted)."""
    if text[start + 1] == "}":
        return start + 1
    end = text.find("\n}", start)
    if end < 0:
        raise ValueError("unterminated struct")
    return end + 1


FIELD_RE = re.compile(r"#\[prost\(([^\]]*)\)\]\s*pub\s+((?:r#)?\w+)\s*:\s*")


def parse_fields(body):
    fields = []
    for m in FIELD_RE.finditer(body):
        attr, rust_name = m.group(1), m.group(2)
        # The type runs to the first comma outside angle brackets.
        depth, j = 0, m.end()
        while j < len(body):
            ch = body[j]
            if ch == "<":
                depth += 1
            elif ch == ">":
                depth -= 1
            elif ch == "," and depth == 0:
                break
            j += 1
        fields.append((attr, rust_name, body[m.end():j]))
    return fields


def parse_attr(attr):
    """`message, optional, tag = "1"` -> dict(kind=..., card=..., tag=..., map=(k, v))."""
    out = {}
    m = re.search(r'tag\s*=\s*"(\d+)"', attr)
    out["tag"] = int(m.group(1))
    m = re.search(r'(?:btree_map|map|hash_map)\s*=\s*"([^"]+)"', attr)
    if m:
        k, v = [p.strip() for p in m.group(1).split(",")]
        out["card"] = "Map"
        out["map"] = (k, v)
        return out
    items = [p.strip() for p in attr.split(",")]
    kind = items[0]
    if kind.startswith("bytes"):
        kind = "bytes"
    if kind.startswith("enumeration"):
        kind = "enumeration"
    out["kind"] = kind
    out["card"] = "Repeated" if "repeated" in items else "Optional"
    return out


def parse_k8s_pb(root):
    """Returns {proto name: {"module": [...], "rust": name, "fields": [...]}} and the
    `Resource` impls as {(module tuple, rust name): (group, api_version, kind)}."""
    messages = {}
    resources = {}
    for path in sorted(glob.glob(os.path.join(root, "**", "mod.rs"), recursive=True)):
        rel = os.path.relpath(os.path.dirname(path), root)
        module = rel.split(os.sep)
        text = open(path, encoding="utf-8").read()
        for m in re.finditer(r"^pub struct (\w+) \{", text, re.M):
            name = m.group(1)
            body = text[m.end() - 1: struct_end(text, m.end() - 1) + 1]
            messages[(tuple(module), name)] = parse_fields(body)
        for m in re.finditer(r"^impl crate::Resource for (\w+) \{(.*?)^\}", text, re.M | re.S):
            consts = dict(re.findall(r'const (\w+): &\'static str = "([^"]*)";', m.group(2)))
            resources[(tuple(module), m.group(1))] = (
                consts["GROUP"], consts["API_VERSION"], consts["KIND"])
    return messages, resources


def parse_k8s_openapi(root):
    """Returns ({(module tuple, lowercase struct): (struct name, {norm(json): json})},
    {norm(json): Counter(json)}, {lowercase struct: Counter(struct)}, resources)."""
    per_type = {}
    global_names = defaultdict(Counter)
    global_structs = defaultdict(Counter)
    resources = {}
    for path in sorted(glob.glob(os.path.join(root, "**", "*.rs"), recursive=True)):
        rel = os.path.relpath(os.path.dirname(path), root)
        module = tuple(rel.split(os.sep))
        text = open(path, encoding="utf-8").read()
        m = re.search(r"^pub (?:struct|enum) (\w+)", text, re.M)
        if not m:
            continue
        struct = m.group(1)
        global_structs[struct.lower()][struct] += 1
        names = {}
        for json_name in re.findall(r'^\s*"([^"]+)" => Field::Key_\w+,', text, re.M):
            n = norm(json_name)
            if n in names and names[n] != json_name:
                print(f"warning: {struct}: {names[n]} and {json_name} normalize alike",
                      file=sys.stderr)
            names[n] = json_name
            global_names[n][json_name] += 1
        per_type[(module, struct.lower())] = (struct, names)
        for r in re.finditer(r"impl crate::Resource for (\w+) \{(.*?)\n\}", text, re.S):
            consts = dict(re.findall(r'const (\w+): &\'static str = "([^"]*)";', r.group(2)))
            resources[(module, r.group(1).lower())] = (
                consts["GROUP"], consts["API_VERSION"], consts["KIND"])
    return per_type, global_names, global_structs, resources


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k8s-pb", default=default_dir("~/.cargo/registry/src/*/k8s-pb-0.9.*/src"))
    ap.add_argument("--k8s-openapi",
                    default=default_dir("~/.cargo/registry/src/*/k8s-openapi-0.29.*/src/v1_33"))
    args = ap.parse_args()
    if not args.k8s_pb or not args.k8s_openapi:
        sys.exit("k8s-pb or k8s-openapi source not found; run `cargo fetch` or pass the paths")

    pb_messages, pb_resources = parse_k8s_pb(args.k8s_pb)
    oa_types, oa_names, oa_structs, oa_resources = parse_k8s_openapi(args.k8s_openapi)
    pb_kinds = defaultdict(Counter)
    for (_, _, kind) in pb_resources.values():
        pb_kinds[kind.lower()][kind] += 1

    def upstream_name(module, rust):
        """The Go/proto message name for prost's `rust` in `module`."""
        hit = oa_types.get((module, rust.lower()))
        if hit:
            return hit[0]
        for table in (oa_structs, pb_kinds):
            c = table.get(rust.lower())
            if c:
                return c.most_common(1)[0][0]
        return rust

    def full_name(module, rust):
        return PACKAGE_PREFIX + ".".join(module) + "." + upstream_name(tuple(module), rust)

    # k8s-openapi field names by type, merged over the versions of a group, so that types
    # only k8s-pb has (older or newer versions) find their names in a sibling version.
    by_group = defaultdict(dict)
    for (module, lower), (_, names) in oa_types.items():
        by_group[(module[:-1], lower)].update(names)

    def own_names(module, rust):
        hit = oa_types.get((module, rust.lower()))
        if hit and hit[1]:
            return hit[1]
        return by_group.get((module[:-1], rust.lower()), {})

    def is_inline(module, rust, n, vm, vr):
        """Go embeds some structs (`LocalObjectReference `json:",inline"``): proto has a
        field named after the type, the JSON has the embedded struct's fields instead.
        Decided by the type's own k8s-openapi names when it has them (only this version:
        RuntimeClass v1alpha1 nests what v1 inlines), else by the field being named after
        its type and unknown as a JSON name."""
        if (rust, n) in NOT_INLINE:
            return False
        own = oa_types.get((module, rust.lower()), (None, {}))[1]
        if own:
            if n in own:
                return False
            inner = own_names(vm, vr) or {norm(f[1]): f[1] for f in pb_messages[(vm, vr)]}
            return any(k in own for k in inner)
        guess = n not in oa_names and n == norm(vr)
        if guess:
            print(f"inline by name: {'/'.join(module)}.{rust}.{n}", file=sys.stderr)
        return guess

    known = {(m, r) for (m, r) in pb_messages}
    stats = Counter()
    messages = {}
    for (module, rust), raw_fields in pb_messages.items():
        name = full_name(module, rust)
        if name in messages:
            sys.exit(f"duplicate message {name}")
        own = own_names(module, rust)
        fields = []
        for attr, rust_field, ty in raw_fields:
            a = parse_attr(attr)
            n = norm(rust_field)
            if a["card"] == "Optional" and a["kind"] == "message":
                vm, vr = resolve(list(module), strip_wrappers(ty))
                if is_inline(module, rust, n, tuple(vm), vr):
                    fields.append((a["tag"], "", f'Msg("{full_name(vm, vr)}")', "Inline"))
                    stats["inline (embedded) fields"] += 1
                    continue
            if n in own:
                json_name = own[n]
                stats["json name from the type"] += 1
            elif n in oa_names:
                json_name = oa_names[n].most_common(1)[0][0]
                stats["json name from another type"] += 1
            else:
                json_name = lower_camel(rust_field[2:] if rust_field.startswith("r#") else rust_field)
                stats["json name by lowerCamelCase"] += 1
            if a["card"] == "Map":
                k, v = a["map"]
                key = SCALARS[k]
                if v == "message":
                    vm, vr = resolve(list(module), strip_wrappers(ty))
                    if (tuple(vm), vr) not in known:
                        sys.exit(f"{name}.{json_name}: unknown message {vm}/{vr}")
                    kind = f'Msg("{full_name(vm, vr)}")'
                else:
                    kind = SCALARS[v.split(" ")[0]]
                card = f"Map({key})"
            else:
                if a["kind"] == "message":
                    vm, vr = resolve(list(module), strip_wrappers(ty))
                    if (tuple(vm), vr) not in known:
                        sys.exit(f"{name}.{json_name}: unknown message {vm}/{vr}")
                    kind = f'Msg("{full_name(vm, vr)}")'
                else:
                    kind = SCALARS[a["kind"]]
                card = "One" if a["card"] == "Optional" else "Many"
            fields.append((a["tag"], json_name, kind, card))
        fields.sort()
        tags = [f[0] for f in fields]
        if len(set(tags)) != len(tags):
            sys.exit(f"{name}: duplicate tags")
        special = SPECIAL.get(name)
        if special is None and name.endswith("." + EXTRA_VALUE):
            special = "StringArray"
        messages[name] = (module, rust, special or "None", fields)
    for name in SPECIAL:
        if name not in messages:
            sys.exit(f"special message {name} not found in k8s-pb")

    # Kinds: (apiVersion, kind) -> message.
    kinds = {}
    resource_kinds = set()
    for src in (pb_resources, oa_resources):
        for (module, rust), (group, api_version, kind) in src.items():
            dirname = "/".join(module[:-1])
            if (module, rust) not in pb_messages and (module, rust.lower()) not in {
                    (m, r.lower()) for (m, r) in pb_messages}:
                continue  # a k8s-openapi type k8s-pb does not have
            if dirname == "apimachinery/pkg/apis/meta":
                # Status, APIVersions...: "unversioned" kinds served as plain "v1".
                rust_name = next(r for (m, r) in pb_messages if m == module and r.lower() == rust.lower())
                kinds[(api_version, kind)] = full_name(list(module), rust_name)
                continue
            if GROUPS.get(dirname) != group:
                sys.exit(f"group of {'/'.join(module)} is {group!r}, table says {GROUPS.get(dirname)!r}")
            resource_kinds.add((module, rust.lower()))
    object_meta = {META + "ObjectMeta", META + "ListMeta"}
    for name, (module, rust, _, fields) in messages.items():
        dirname = "/".join(module[:-1])
        if dirname not in GROUPS:
            continue
        group, version = GROUPS[dirname], module[-1]
        api_version = f"{group}/{version}" if group else version
        kind = name.rsplit(".", 1)[1]
        has_meta = any(f[1] == "metadata" and f[2][5:-2] in object_meta for f in fields)
        is_resource = (tuple(module), rust.lower()) in resource_kinds
        template = kind.endswith("Spec") or kind.endswith("Template")
        if is_resource or (has_meta and not template) or (has_meta and kind == "PodTemplate"):
            kinds[(api_version, kind)] = name

    out = []
    w = out.append
    w("//! Message table for the Kubernetes protobuf codec: every message of k8s-pb with its")
    w("//! fields (tag, JSON name, kind, cardinality), and the (apiVersion, kind) -> message map.")
    w("//!")
    w("//! Generated by hack/gen-protobuf-schema.py from k8s-pb 0.9 and k8s-openapi 0.29; do not edit.")
    w("//! Regenerate with `python3 hack/gen-protobuf-schema.py > apiserver/src/protobuf/schema.rs`.")
    w("")
    used = set()
    for (_, _, _, fields) in messages.values():
        for (_, _, kind, card) in fields:
            used.add(kind.split("(")[0])
            used.add(card.split("(")[0])
            if card.startswith("Map("):
                used.add(card[4:-1])
    cards = sorted(c for c in ("Inline", "Many", "Map", "One") if c in used)
    kinds_used = sorted(k for k in set(SCALARS.values()) | {"Msg"} if k in used)
    w(f"use super::Card::{{{', '.join(cards)}}};")
    w(f"use super::Kind::{{{', '.join(kinds_used)}}};")
    w("use super::{Field, Message, Special};")
    w("")
    w("const fn f(tag: u32, json: &'static str, kind: super::Kind, card: super::Card) -> Field {")
    w("    Field { tag, json, kind, card }")
    w("}")
    w("")
    w(f"/// {len(messages)} messages, sorted by name.")
    w("#[rustfmt::skip]")
    w("pub static MESSAGES: &[Message] = &[")
    for name in sorted(messages):
        _, _, special, fields = messages[name]
        w(f'    Message {{ name: "{name}", special: Special::{special}, fields: &[')
        for tag, json_name, kind, card in fields:
            w(f'        f({tag}, "{json_name}", {kind}, {card}),')
        w("    ] },")
    w("];")
    w("")
    w(f"/// {len(kinds)} (apiVersion, kind) -> message entries, sorted.")
    w("#[rustfmt::skip]")
    w("pub static KINDS: &[(&str, &str, &str)] = &[")
    for (api_version, kind) in sorted(kinds):
        w(f'    ("{api_version}", "{kind}", "{kinds[(api_version, kind)]}"),')
    w("];")
    sys.stdout.write("\n".join(out) + "\n")
    nfields = sum(len(m[3]) for m in messages.values())
    print(f"{len(messages)} messages, {nfields} fields, {len(kinds)} kinds; {dict(stats)}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
