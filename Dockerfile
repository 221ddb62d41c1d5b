# cs-agent: the HTTP service. Build with `docker build -t cs-agent .`; run with docker-compose.yml.
# The image holds the installed wheel and nothing of the source tree: the migrations, the
# chat page and the help articles are package data (pyproject.toml), found without PYTHONPATH.
# tests/scale/test_wheel.py runs these steps (wheel, clean install, migrate) on every `make test`.

# The wheel, built from the sources alone.
FROM python:3.11-slim AS wheel
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --create-home --uid 10001 --user-group csagent
WORKDIR /srv/cs-agent

# Dependencies first, pinned by constraints.txt and installed against a stub package, so a
# code change does not reinstall them.
COPY pyproject.toml constraints.txt README.md ./
RUN mkdir app && touch app/__init__.py \
    && pip install -c constraints.txt . \
    && pip uninstall -y cs-agent \
    && rm -rf app build ./*.egg-info pyproject.toml README.md

# .data is used only when DATABASE_URL is unset (embedded PostgreSQL, which refuses root).
COPY --from=wheel /wheels /wheels
RUN pip install --no-deps -c constraints.txt /wheels/*.whl \
    && rm -rf /wheels constraints.txt \
    && mkdir .data && chown 10001:10001 .data

USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PORT', '8000'), timeout=4)"]
CMD ["python", "-m", "app", "serve", "--host", "0.0.0.0"]
