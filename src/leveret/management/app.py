"""The management HTTP application: authentication, error answers in RabbitMQ's shapes,
the dashboard's files, and every handler module's routes."""

from __future__ import annotations

from importlib import resources

from aiohttp import web

from leveret.broker.events import API_ACTOR
from leveret.management import (
    admin,
    api,
    dashboard,
    health,
    objects,
    operate,
    otlp,
    routing,
    streamconns,
    superstreams,
)
from leveret.management.context import MANAGEMENT, Management, mgmt
from leveret.management.httputil import (
    MANAGEMENT_TAGS,
    USER,
    ApiError,
    Handler,
    as_the_listener_answers,
    credentials,
    from_amqp,
    gzip_if_accepted,
    json_response,
)
from leveret.protocol.errors import AMQPError

# ------------------------------------------------------------------- middleware
# The resources whose is_authorized lets every request in (rabbit_mgmt_wm_auth: how the UI
# logs in, asked before it has any credentials)
OPEN = frozenset({"/api/auth", "/api/auth/"})
CHALLENGE = {"WWW-Authenticate": 'Basic realm="RabbitMQ Management"'}


@web.middleware
async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await answer(request, handler)
    gzip_if_accepted(request, response)
    return response


async def answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    # RabbitMQ's router and its resources' method checks answer first: unknown paths,
    # methods a path does not allow and OPTIONS never ask for credentials
    early = routing.answer(request)
    if early is not None:
        return early
    if not request.path.startswith("/api/"):
        try:
            return await handler(request)
        except web.HTTPNotFound:
            return routing.not_found()
    try:
        refused = None if request.path in OPEN else log_in(request)
        answered = await handler(request) if refused is None else refused
    except ApiError as exc:
        if isinstance(exc.reason, str) and exc.reason in AUTHORISATION_REFUSALS and USER in request:
            overturn(request)
        answered = json_response({"error": exc.error, "reason": exc.reason}, exc.status)
    except AMQPError as exc:
        err = from_amqp(exc)
        answered = json_response({"error": err.error, "reason": err.reason}, err.status)
    except web.HTTPNotFound:
        return routing.not_found()
    # a 401 is cowboy_rest's is_authorized, before the resource's variances are known
    vary = "origin" if answered.status == 401 else routing.resource_vary(request)
    answered.headers["vary"] = vary
    return answered


#: the refusals of a resource's is_authorized check of its user (what it lets each user
#: do): to RabbitMQ a failed login
AUTHORISATION_REFUSALS = frozenset(
    {
        "Not administrator user",
        "Not monitor user",
        "User not authorised to access object",
        "User not authorised to access virtual host",
    }
)


def overturn(request: web.Request) -> None:
    """The request's login, counted as succeeded, failed: its resource refused its user."""
    creds = credentials(request)
    if creds is not None:
        mgmt(request).broker.auth_attempts.overturn("http", request.remote or "", creds[0])


def log_in(request: web.Request) -> web.Response | None:
    """The request's user, as rabbit_mgmt_util:is_authorized checks it: None when let in
    (the user is then the request's, and the actor of what it does), else the refusal
    (a refusal with a reason of its own is raised as an ApiError)."""
    m = mgmt(request)
    creds = credentials(request)
    # RabbitMQ's challenge makes HTTP clients (and browsers) send credentials; a script
    # that asks with X-Requested-With (the dashboard) shows its own login form instead of
    # the browser's prompt, so it gets no challenge
    challenge = {} if request.headers.get("X-Requested-With") else CHALLENGE
    if creds is None:
        return web.Response(status=401, headers=challenge)
    user = m.broker.users.check_credentials(creds[0], creds[1])
    loopback = user is not None and m.broker.users.loopback_only(user.name, request.remote)
    manages = user is not None and bool(MANAGEMENT_TAGS.intersection(user.tags))
    # each login is an attempt of protocol http (rabbit_mgmt_util:is_authorized), counted
    # before the resource answers; one the resource refuses its user fails after all
    # (answer's overturn)
    m.broker.auth_attempts.count("http", request.remote or "", creds[0], manages and not loopback)
    if loopback:
        raise ApiError(401, "not_authorised", "User can only log in via localhost")
    if user is None:
        response = json_response({"error": "not_authorized", "reason": "Login failed"}, 401)
        response.headers.update(challenge)
        return response
    if not manages:
        raise ApiError(401, "not_authorised", "Not management user")
    request[USER] = user
    # who performs what this request does (this task's own: no other request or AMQP
    # session sees it)
    API_ACTOR.set(user.name)
    return None


# ---------------------------------------------------------------- static files
async def index(request: web.Request) -> web.StreamResponse:
    return static_file("index.html")


async def static(request: web.Request) -> web.StreamResponse:
    return static_file(request.match_info["file"])


STATIC_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
}


def static_file(name: str) -> web.StreamResponse:
    if "/" in name or name.startswith("."):
        raise web.HTTPNotFound()
    ext = name[name.rfind(".") :]
    if ext not in STATIC_TYPES:
        raise web.HTTPNotFound()
    try:
        data = resources.files("leveret.management").joinpath("static", name).read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
        raise web.HTTPNotFound() from exc
    return web.Response(
        body=data, content_type=STATIC_TYPES[ext], headers={"Cache-Control": "no-cache"}
    )


def routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/", index)
    r.add_get("/static/{file}", static)
    api.routes(app)
    health.routes(app)
    objects.routes(app)
    admin.routes(app)
    operate.routes(app)
    streamconns.routes(app)


def make_app(management: Management) -> web.Application:
    app = web.Application(middlewares=[middleware], client_max_size=64 * 1024 * 1024)
    app.on_response_prepare.append(as_the_listener_answers)
    app[MANAGEMENT] = management
    routes(app)
    if management.broker.compat.v4:
        superstreams.routes(app)  # rabbitmq_stream_management's, from RabbitMQ 4.2
    if management.server.config.otlp_logs:
        otlp.routes(app)  # OpenTelemetry's POST /v1/logs into the log system
    dashboard.setup(app, management)
    app[routing.LITERALS] = routing.literal_paths(app.router)  # every route is in by now
    return app
