"""OffPolicy Lab settings. Everything comes from the environment; with nothing set the app
runs on a SQLite file under var/ and the `local` cluster backend (see README)."""

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from orchestrator.cluster.backends import registry as backends
from orchestrator.env import env_bool, env_int, env_list, env_secret, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("OPL_VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_secret("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY is not set (set DEBUG=true for a throwaway dev key)")
    SECRET_KEY = "dev-only-insecure-key"
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "orchestrator.accounts",
    "orchestrator.experiments",
    "orchestrator.cluster",
    "orchestrator.metrics",
    "orchestrator.studies",
    "orchestrator.alerts",
    "orchestrator.samples",
    "orchestrator.workspace",
    "orchestrator.launchers",
    "orchestrator.web",
    "axes",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "orchestrator.middleware.ApiErrorsAsJson",  # JSON for every answer under /api/, errors too
    "orchestrator.api_methods.ApiMethodsAsDocumented",  # a method the API document does not list: 405
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",  # sends nothing unless CONTENT_SECURITY_POLICY is set (below)
    "axes.middleware.AxesMiddleware",
    "orchestrator.middleware.SyncChain",
]

ROOT_URLCONF = "orchestrator.urls"
ASGI_APPLICATION = "orchestrator.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'opl.sqlite3'}"), conn_max_age=0)
}
if env_bool("DATABASE_POOL") and DATABASES["default"]["ENGINE"].endswith("postgresql"):
    # For the web server: requests borrow connections from a pool instead of opening one each
    # (~5 ms saved per API call). Not for Celery's forked workers, which must not share one.
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 2,
        "max_size": env_int("DATABASE_POOL_MAX", 10),
        "timeout": 10,
    }
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # The demo runs web, worker, beat and the trainers' pushes against one file. WAL lets readers
    # go on while one writer writes; IMMEDIATE takes the write lock at BEGIN, where SQLite waits
    # for it (busy timeout) instead of failing at once with "database is locked" when a read
    # transaction later tries to write; synchronous=NORMAL is durable at each WAL checkpoint.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": env_int("OPL_SQLITE_BUSY_TIMEOUT_S", 30),
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out user and address before any password check
    "django.contrib.auth.backends.ModelBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "exp-run-list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
WHITENOISE_USE_FINDERS = True  # serve straight from static/ without collectstatic in dev and demo

# --- Security -----------------------------------------------------------------------------------
# Login rate limit (django-axes): OPL_LOGIN_FAILURE_LIMIT wrong passwords for one user name from
# one address lock that pair out (429) for OPL_LOGIN_COOLOFF_MINUTES; a success resets the count.
AXES_FAILURE_LIMIT = env_int("OPL_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("OPL_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False
# Personal API tokens: the longest lifetime a new token may be given (the tokens page offers less).
OPL_API_TOKEN_MAX_DAYS = env_int("OPL_API_TOKEN_MAX_DAYS", 365)
# How long a run's ingestion token still writes after the run succeeded or failed: the trainer's
# last flush (experiments/tokens.py says why it is short).
OPL_RUN_TOKEN_GRACE_S = env_int("OPL_RUN_TOKEN_GRACE_S", 300)
# Served over HTTPS (on by default when DEBUG is off and OPL_PUBLIC_URL is https://): HSTS,
# cookies only over HTTPS, http:// redirected, a Content-Security-Policy and a Referrer-Policy.
HTTPS = env_bool("OPL_HTTPS", not DEBUG and env_str("OPL_PUBLIC_URL").startswith("https://"))
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
PRODUCTION_CSP = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],  # no inline scripts or handlers, no eval: templates use static/js files
        "style-src": ["'self'", "'unsafe-inline'"],  # Plotly and htmx set styles from script
        "img-src": ["'self'", "data:", "blob:"],  # Plotly's image export
        "connect-src": ["'self'"],
        "font-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
if HTTPS and not DEBUG:
    SECURE_HSTS_SECONDS = env_int("OPL_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("OPL_HSTS_INCLUDE_SUBDOMAINS", False)
    SECURE_SSL_REDIRECT = env_bool("OPL_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    SESSION_COOKIE_HTTPONLY = True
    if env_bool("OPL_BEHIND_PROXY", False):  # a reverse proxy that ends TLS and sets X-Forwarded-Proto
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    CONTENT_SECURITY_POLICY = PRODUCTION_CSP

# --- Redis and Celery -------------------------------------------------------------------------
REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = REDIS_URL
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")  # alerts
# Alert webhooks reach public addresses only, plus the hosts, addresses and networks named here
# (e.g. "hooks.lab.internal,10.1.2.0/24"): see orchestrator/alerts/webhook.py.
OPL_WEBHOOK_ALLOW = env_list("OPL_WEBHOOK_ALLOW")
CELERY_BEAT_SCHEDULE = {
    "sync-runs": {"task": "orchestrator.cluster.tasks.sync_runs", "schedule": 3.0},
    "dispatch-queued": {"task": "orchestrator.cluster.tasks.dispatch_queued", "schedule": 3.0},
    "compact-metrics": {"task": "orchestrator.metrics.tasks.compact_metrics", "schedule": 300.0},
    "check-alerts": {"task": "orchestrator.alerts.tasks.check_alerts", "schedule": 30.0},
    "expire-external-runs": {"task": "orchestrator.experiments.tasks.expire_external_runs", "schedule": 30.0},
}

# --- Runs and clusters ------------------------------------------------------------------------
# One of the registered backends (orchestrator/cluster/backends/registry.py); checked at startup.
CLUSTER_BACKEND = env_str("CLUSTER_BACKEND", backends.DEFAULT_BACKEND)
if problem := backends.name_problem(CLUSTER_BACKEND):
    raise ImproperlyConfigured(problem)
# The URL jobs use to reach this dashboard (metrics and heartbeats).
PUBLIC_URL = env_str("OPL_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")
RUNS_DIR = Path(env_str("OPL_RUNS_DIR", str(VAR_DIR / "runs")))
LOCAL_JOBS_DIR = Path(env_str("OPL_LOCAL_JOBS_DIR", str(VAR_DIR / "local-jobs")))
# Python that runs the trainer; on a cluster this is the node's environment, not ours.
TRAINER_PYTHON = env_str("OPL_TRAINER_PYTHON", "")
# One trainer per core for a backend on this machine; a cluster schedules its own nodes.
LOCAL_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
_RUNS_HERE = backends.REGISTRY[CLUSTER_BACKEND].capabilities.this_machine
MAX_ACTIVE_RUNS = env_int("OPL_MAX_ACTIVE_RUNS", LOCAL_CORES if _RUNS_HERE else 4)
# A run claimed for submission this long ago without a job id: its submit task died; sync
# looks the job up by name and, when none exists, submits again (same attempt, same name).
SUBMIT_STALE_SECONDS = env_int("OPL_SUBMIT_STALE_SECONDS", 60)
# Queue limits (0 = none): one person's 500-run sweep must not starve the lab.
OPL_MAX_SWEEP_RUNS = env_int("OPL_MAX_SWEEP_RUNS", 5000)
OPL_USER_MAX_ACTIVE_RUNS = env_int("OPL_USER_MAX_ACTIVE_RUNS", 0)
OPL_USER_MAX_GPUS = env_int("OPL_USER_MAX_GPUS", 0)
OPL_PROJECT_MAX_ACTIVE_RUNS = env_int("OPL_PROJECT_MAX_ACTIVE_RUNS", 0)
OPL_PROJECT_MAX_GPUS = env_int("OPL_PROJECT_MAX_GPUS", 0)
OPL_MAX_GPUS = env_int("OPL_MAX_GPUS", 0)
# rollout samples kept per run; over the bound older steps are thinned
OPL_SAMPLES_MAX_PER_RUN = env_int("OPL_SAMPLES_MAX_PER_RUN", 2000)
OPL_SAMPLES_MAX_EVAL_PER_RUN = env_int("OPL_SAMPLES_MAX_EVAL_PER_RUN", 1000)
# saved chart views: a view's state as compact JSON, and views per project
OPL_VIEW_MAX_BYTES = env_int("OPL_VIEW_MAX_BYTES", 65_536)
OPL_VIEWS_PER_PROJECT = env_int("OPL_VIEWS_PER_PROJECT", 200)
OPL_METRIC_DIRECTIONS = env_str(
    "OPL_METRIC_DIRECTIONS", ""
)  # "custom/score=max,custom/*_loss=min": "best" of keys the trainer table lacks
OPL_PRESETS_DIR = Path(env_str("OPL_PRESETS_DIR", str(BASE_DIR / "examples" / "presets")))
LOST_GRACE_SECONDS = env_int("OPL_LOST_GRACE_SECONDS", 120)
STALL_SECONDS = env_int("OPL_STALL_SECONDS", 600)  # no heartbeat this long while RUNNING: stalled
CANCEL_GRACE_SECONDS = env_int("OPL_CANCEL_GRACE_SECONDS", 30)

# --- Ingestion limits (metric and sample batches from trainers; docs/OPERATIONS.md) ------
# Each is answered with a JSON 413 (or 400 for a count) naming it; the trainer's pusher halves a
# batch that gets a 413 and sends the halves, so a limit never loses points or samples.
OPL_INGEST_MAX_BODY_BYTES = env_int("OPL_INGEST_MAX_BODY_BYTES", 2_621_440)  # as sent (gzip); Django's 2.5 MiB
OPL_INGEST_MAX_INFLATED_BYTES = env_int("OPL_INGEST_MAX_INFLATED_BYTES", 64 << 20)
OPL_INGEST_MAX_INFLATE_RATIO = env_int("OPL_INGEST_MAX_INFLATE_RATIO", 100)  # batches: 7-40x; gzip bombs: ~1,000x
OPL_INGEST_MAX_POINTS_PER_BATCH = env_int("OPL_INGEST_MAX_POINTS_PER_BATCH", 200_000)
OPL_SAMPLES_MAX_PER_BATCH = env_int("OPL_SAMPLES_MAX_PER_BATCH", 512)  # the trainer sends <= 64
OPL_INGEST_MAX_QUEUED = env_int("OPL_INGEST_MAX_QUEUED", 16)  # batches of one run queued per server process
OPL_INGEST_RETRY_AFTER_S = env_int("OPL_INGEST_RETRY_AFTER_S", 1)  # the 429's Retry-After

# --- Slurm (slurmrestd with JWT); see orchestrator/cluster/slurm/config.py -----------------------
SLURM_REST_URL = env_str("SLURM_REST_URL")
SLURM_REST_USER = env_str("SLURM_REST_USER")
SLURM_JWT = env_secret("SLURM_JWT")
SLURM_JWT_KEY_FILE = env_str("SLURM_JWT_KEY_FILE")
SLURM_REST_API_VERSION = env_str("SLURM_REST_API_VERSION", "auto")
SLURM_REST_TIMEOUT = env_int("SLURM_REST_TIMEOUT", 10)
SLURM_ACCOUNTING = env_bool("SLURM_ACCOUNTING", False)
SLURM_RUN_DIR_MODE = env_str("SLURM_RUN_DIR_MODE")
if problem := backends.settings_problem(globals()):  # the settings the chosen backend needs
    raise ImproperlyConfigured(problem)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"httpx": {"level": "WARNING"}, "httpcore": {"level": "WARNING"}},
}
