# shellcheck shell=sh
# What every shell program run in the front container shares (components/template.py puts it first):
# finding nginx's master and workers, and a graceful reload that returns once the new workers run.

# A process's title (nginx sets "nginx: master process ...", "nginx: worker process").
title() { { tr -d '\000' < "/proc/$1/cmdline"; } 2>/dev/null || true; }
is_master() { case "$(title 1)" in "nginx: master process"*) return 0 ;; esac; return 1; }
workers() {
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    if [ "$(title "$p")" = "nginx: worker process" ]; then echo "$p"; fi
  done
}
# Which of the given processes still run.
alive() { for p in $1; do if [ -d "/proc/$p" ]; then echo "$p"; fi; done; }

# SIGHUP to the master when one runs, then wait until the master runs workers and none of them is
# an old one still accepting (old workers finishing their requests are titled "nginx: worker
# process is shutting down"). Polls every 50 ms, at most $1 times: returns 1 then. Sets $old to
# the workers that served before.
reload_nginx() {
  old=""
  if is_master; then
    old=$(workers)
    kill -HUP 1
  fi
  tries=0
  while :; do
    if is_master; then
      now=$(workers)
      stale=0
      for p in $old; do
        for q in $now; do if [ "$p" = "$q" ]; then stale=1; fi; done
      done
      if [ -n "$now" ] && [ "$stale" = 0 ]; then return 0; fi
    fi
    tries=$((tries + 1))
    if [ "$tries" -gt "$1" ]; then return 1; fi
    sleep 0.05
  done
}
