"""The gate's verdict as JUnit XML, the format CI systems (GitHub Actions reporters, GitLab's `artifacts:reports:
junit`, Jenkins) show as tests: one test case per compared row (failed: slower, failed, lost Tensor Cores; skipped:
not judged), and one for the comparability check, an error where the captures cannot be compared."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from .gate import REGRESSIONS


def _fmt(x) -> str:
    return "-" if x is None else f"{x:,.6g}"


def detail(r: dict) -> str:
    """One row in words: both values, the change, the noise floor and where it comes from, why the verdict."""
    change = "-" if r["change"] is None else f"{r['change']:+.1%}"
    return (
        f"baseline {_fmt(r['baseline'])} {r['unit']}, current {_fmt(r['current'])} {r['unit']}, change {change}, "
        f"noise floor {r['noise_floor']:.1%} ({r['floor_from']}): {r['why']}"
    )


def junit_xml(doc: dict) -> str:
    rows = doc["rows"]
    failures = sum(r["verdict"] in REGRESSIONS for r in rows)
    skipped = sum(r["verdict"] == "not judged" for r in rows)
    errors = 1 if doc["incomparable"] else 0
    suite = ET.Element(
        "testsuite",
        name="dawnscope gate",
        tests=str(len(rows) + 1),
        failures=str(failures),
        errors=str(errors),
        skipped=str(skipped),
    )
    check = ET.SubElement(suite, "testcase", classname="dawnscope.gate", name="the captures can be compared")
    if doc["incomparable"]:
        text = "; ".join(f"{i['what']}: {i['detail']}" for i in doc["incomparable"])
        ET.SubElement(check, "error", message="the captures cannot be compared", type="incomparable").text = text
    for r in rows:
        case = ET.SubElement(suite, "testcase", classname=f"dawnscope.gate.{r['metric']}", name=r["name"])
        words = detail(r)
        if r["verdict"] in REGRESSIONS:
            ET.SubElement(case, "failure", message=r["verdict"], type="regression").text = words
        elif r["verdict"] == "not judged":
            ET.SubElement(case, "skipped", message=r["why"])
        ET.SubElement(case, "system-out").text = words
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
