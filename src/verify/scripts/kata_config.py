import json, os, tomllib
r = {"check": "kata.annotations", "classes": []}
for c in json.loads(os.environ["CONFIGS"]):
    out = {"class": c["class"], "path": c["path"], "table": c["table"], "files": []}
    r["classes"].append(out)
    try:
        with open(c["path"], "rb") as f:
            merged = tomllib.load(f)
    except FileNotFoundError:
        out["missing"] = True
        continue
    except (OSError, tomllib.TOMLDecodeError) as e:
        out["error"] = "%s: %s" % (c["path"], e)
        continue
    out["files"].append(c["path"])

    def annotations(doc):
        h = doc.get("hypervisor")
        t = h.get(c["table"]) if isinstance(h, dict) else None
        return t.get("enable_annotations") if isinstance(t, dict) else None

    def merge(base, top):
        for k, v in top.items():
            if isinstance(v, dict) and isinstance(base.get(k), dict):
                merge(base[k], v)
            else:
                base[k] = v

    if annotations(merged) is not None:
        out["set_by"] = c["path"]
    d = os.path.join(os.path.dirname(c["path"]), "config.d")
    try:
        names = sorted(os.listdir(d))
    except FileNotFoundError:
        names = []
    except OSError as e:
        out["error"] = "%s: %s" % (d, e)
        continue
    for n in names:
        p = os.path.join(d, n)
        try:
            with open(p, "rb") as f:
                doc = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as e:
            out["error"] = "%s: %s" % (p, e)
            break
        out["files"].append(p)
        if annotations(doc) is not None:
            out["set_by"] = p
        merge(merged, doc)
    if "error" not in out:
        out["enable_annotations"] = annotations(merged)
line = json.dumps(r, separators=(",", ":"))
open("/dev/termination-log", "w").write(line)
print(line)
