"""The rule references (``fl_async.aggregators.reference``) called one update at a time with an
explicit staleness weight, as the older kernel tests feed them."""

from fl_async.aggregators import ClientUpdate
from fl_async.aggregators.reference import ca2fl, dcasgd, fadas, gsgm, mifa, trend_smooth

gsgm_variant_reference = gsgm.step


def _weight(weight):
    return lambda _tau: weight


def gsgm_reference(state, node, delta, weight, **hyper):
    return gsgm.step(state, node, list(delta), weight, 0, **hyper)


def dcasgd_reference(state, delta, base, weight, **hyper):
    u = ClientUpdate(node_id=0, delta=delta, base=base)
    return dcasgd.update(state, u, staleness=_weight(weight), **hyper)[0]


def trend_smooth_reference(state, delta, weight, **hyper):
    u = ClientUpdate(node_id=0, delta=delta)
    return trend_smooth.update(state, u, staleness=_weight(weight), **hyper)[0]


def mifa_reference(state, node, delta, **hyper):
    new, status = mifa.update(state, ClientUpdate(node_id=node, delta=delta), **hyper)
    return {**new, "stepped": status == "applied"}


def ca2fl_reference(state, node, delta, **hyper):
    return ca2fl.update(state, ClientUpdate(node_id=node, delta=delta), **hyper)[0]


def fadas_reference(state, delta, staleness, **hyper):
    return fadas.update(state, ClientUpdate(node_id=0, delta=delta, staleness=staleness), **hyper)[
        0
    ]
