#!/usr/bin/env bash
# Installs the system packages the test suite uses for real components: PostgreSQL (team
# tracking backend), SLURM + munge (job-array executor), R + pROC (independent DeLong
# reference), Chromium with its ChromeDriver (the UI tests) and a Java 17+ runtime (local Spark
# for mlflow.pyfunc.spark_udf). Idempotent; skips what is already there.
set -euo pipefail
need=()
command -v Rscript >/dev/null 2>&1 && Rscript -e 'library(pROC)' >/dev/null 2>&1 || need+=(r-base-core r-cran-proc)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v slurmctld >/dev/null 2>&1 || need+=(slurm-wlm munge)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
if [ ${#need[@]} -eq 0 ]; then echo "system-deps: all present"; exit 0; fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else
    echo "system-deps: not root and no sudo; tests needing ${need[*]} will be skipped" >&2; exit 0; fi
fi
echo "system-deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || true
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# Debian starts services on install on some machines; tests start their own instances.
$SUDO service postgresql stop >/dev/null 2>&1 || true
