"""A vigil probe plugin in Python: GETs a cluster's http(s):// health URL and checks it.

Conditions, from the cluster's parameters (the defaults of NAME.toml under its own):
- `expected-status`: the status codes that mean healthy, comma-separated (default `200`);
- `body-contains`: text the body must contain (none by default).

It follows up to three redirects, each one a request of its own through vigil's `http`
interface, so each goes only where vigil's egress rules allow: a redirect elsewhere is
answered `denied`, and the probe is inconclusive, never a failure of the cluster.

componentize-py builds this module into a component of the contract's `probe` world: the
class `Prober` implements the exported `prober` interface.
"""

from urllib.parse import urljoin

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import http
from wit_world.imports.types import (
    Cluster,
    Failure,
    PluginInfo,
    ProbeError_Inconclusive,
    ProbeError_NotProbeable,
    ProbeReport,
    ProbeRequest,
    ReasonClass,
    Verdict,
)

VERSION = "0.1.0"
SCHEMES = ("http", "https")
REDIRECTS = (301, 302, 303, 307, 308)
MAX_REDIRECTS = 3


class Prober(exports.Prober):
    def info(self) -> PluginInfo:
        return PluginInfo(
            name="python-http-probe",
            version=VERSION,
            schemes=list(SCHEMES),
            description="GETs a health URL and checks its status and body (Python)",
        )

    def accepts(self, cluster: Cluster) -> bool:
        return cluster.reference.split("://", 1)[0].lower() in SCHEMES

    def probe(self, request: ProbeRequest) -> ProbeReport:
        parameters = dict(request.cluster.parameters)
        expected = expected_statuses(parameters.get("expected-status", "200"))
        needle = parameters.get("body-contains")
        url = request.cluster.reference
        for _ in range(MAX_REDIRECTS + 1):
            try:
                # vigil sends it (only where the egress rules allow), bounded by what is
                # left of the probe's budget.
                response = http.send(http.Request("GET", url, [], None, None, None))
            except Err as error:
                return no_answer(error.value)
            location = header(response, "location")
            if response.status not in REDIRECTS or location is None:
                break
            url = urljoin(url, location)
        return judge(expected, needle, response)


# What each way a request can get no answer says of the cluster.
NO_ANSWER = {
    http.HttpError_Timeout: (ReasonClass.TIMEOUT, "no answer within the probe's budget"),
    http.HttpError_Refused: (ReasonClass.REFUSED, "connection refused"),
    http.HttpError_Tls: (ReasonClass.TLS, "TLS handshake failed"),
    http.HttpError_Dns: (ReasonClass.DNS, "the host name could not be resolved"),
    http.HttpError_Protocol: (ReasonClass.BAD_RESPONSE, "the exchange failed"),
    http.HttpError_TooLarge: (ReasonClass.BAD_RESPONSE, "the body exceeded vigil's limit"),
}


def no_answer(error: http.HttpError) -> ProbeReport:
    """A request that got no answer. `denied` is vigil's egress policy saying no, which
    tells nothing of the cluster: inconclusive. Anything else happened on the way to the
    cluster: unhealthy (vigil believes it only if the cluster was contacted)."""
    if isinstance(error, http.HttpError_Denied):
        message = f"request denied by vigil's egress policy: {error.value}"
        raise Err(ProbeError_Inconclusive(Failure(ReasonClass.DENIED, message)))
    reason, message = NO_ANSWER[type(error)]
    if getattr(error, "value", None):
        message = f"{message}: {error.value}"
    return ProbeReport(Verdict.UNHEALTHY, reason, message, 0, None, [])


def expected_statuses(text: str) -> set[int]:
    try:
        codes = {int(code) for code in text.split(",") if code.strip()}
    except ValueError:
        codes = set()
    if not codes or not all(100 <= code <= 599 for code in codes):
        # A setting the plugin cannot use: the cluster cannot be probed as configured.
        raise Err(
            ProbeError_NotProbeable(
                Failure(
                    ReasonClass.REFERENCE_BROKEN,
                    f"parameter expected-status: {text!r} is not a list of status codes",
                )
            )
        )
    return codes


def header(response: http.Response, name: str) -> str | None:
    return next((v for k, v in response.headers if k.lower() == name), None)


def judge(expected: set[int], needle: str | None, response: http.Response) -> ProbeReport:
    """Healthy when every condition holds; otherwise unhealthy with the reason of the
    first condition that failed, naming each one and the value seen (401 and 403 are the
    credentials refused). The body is never quoted: whoever registers a cluster chooses
    its URL, and a report quoting it would let them read any page vigil can reach."""
    failed: list[tuple[ReasonClass, str]] = []
    details = [("status", str(response.status))]
    if response.status not in expected:
        wanted = ",".join(str(code) for code in sorted(expected))
        server = response.status >= 500
        reason = ReasonClass.SERVER_ERROR if server else ReasonClass.BAD_RESPONSE
        failed.append((reason, f"status {response.status}, expected {wanted}"))
    if needle is not None and needle.encode() not in response.body:
        size = len(response.body)
        message = f"the body ({size} bytes) does not contain {needle!r}"
        failed.append((ReasonClass.BAD_RESPONSE, message))
        details.append(("body-bytes", str(size)))
    message = "; ".join(text for _, text in failed) or f"status {response.status}"
    if not failed:
        verdict, reason = Verdict.HEALTHY, None
    elif response.status in (401, 403) and response.status not in expected:
        verdict, reason = Verdict.CREDENTIALS_REJECTED, ReasonClass.UNAUTHORIZED
    else:
        verdict, reason = Verdict.UNHEALTHY, failed[0][0]
    return ProbeReport(verdict, reason, message, response.latency_ms, None, details)
