"""`auto` (the headline variant): one source for its route, and every case reaches a registered family."""
import yaml

from conftest import REPO
from kernels import get_variant, list_cases, list_variants, load_case, make_input, make_weights, reference_forward, gate
from kernels.families import DEFAULT_ROUTE, route_for


def test_the_route_is_the_variant_config():
    cfg = yaml.safe_load(open(f"{REPO}/config/variant/auto.yaml"))
    assert DEFAULT_ROUTE == cfg["params"]["route"], "the Python API and the pipeline must route alike"


def test_every_case_routes_to_a_registered_variant_that_knows_its_family():
    for name in list_cases():
        case = load_case(name)
        target = route_for(case)
        assert target in list_variants(kind="ours"), (name, target)
        fams = get_variant(target).families
        assert case.family in fams or target == "hybrid", (name, target, fams)


def test_auto_prepares_and_passes_on_each_smoke_case():
    """One smoke case per family: auto prepares it through the route (dag-like smoke2 included) and passes the gate."""
    for name in list_cases(smoke=True):
        case = load_case(name)
        w = make_weights(case)
        v = get_variant("auto")
        p = v.prepare(case, w)
        x = make_input(case, 1.0, 0)
        assert gate(v.run(p, x), reference_forward(case, w, x)).passed, name


def test_a_case_name_in_the_route_wins_over_its_family():
    case = load_case(2)
    assert route_for(case, {"dag": "dag", "case02": "hybrid"}) == "hybrid"
    assert route_for(case, {"dag": "dag", "case12": "hybrid"}) == "dag"
