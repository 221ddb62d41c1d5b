# cs-agent: the HTTP service. Build with `docker build -t cs-agent .`; run with docker-compose.yml.
FROM python:3.11-slim

# PYTHONPATH: import `app` from this folder rather than site-packages, so the code finds
# migrations/ beside it (app/db/migrate.py looks next to the source tree), also for `cs-agent`.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/srv/cs-agent

RUN useradd --create-home --uid 10001 --user-group csagent
WORKDIR /srv/cs-agent

# Dependencies first, built against a stub package, so a code change does not reinstall them.
COPY pyproject.toml constraints.txt README.md* ./
RUN mkdir app && touch app/__init__.py \
    && pip install -c constraints.txt . \
    && pip uninstall -y cs-agent \
    && rm -rf app build *.egg-info

COPY app ./app
COPY migrations ./migrations
# .data is used only when DATABASE_URL is unset (embedded PostgreSQL, which refuses root).
RUN pip install --no-deps -c constraints.txt . \
    && rm -rf build *.egg-info \
    && mkdir .data && chown csagent:csagent .data

USER csagent
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PORT', '8000'), timeout=4)"
CMD ["python", "-m", "app", "serve", "--host", "0.0.0.0"]
