// tenure: live updates for the server-rendered pages. No framework, no
// build step. The page works without this script; with it, the page
// subscribes to the SSE feed (/api/v1/events) and, when something happens,
// fetches the same URL again and swaps the elements marked data-swap (the
// timeline's SVG, the tables, the summary): the server's render stays the
// source of truth and the page is never reloaded as a whole.
(function () {
  "use strict";
  var body = document.body;
  var mode = body.getAttribute("data-live"); // "swap", "reload" or "off"
  var election = body.getAttribute("data-election");
  var badge = document.getElementById("live-status");
  var TYPES = ["term_started", "term_ended", "leader_value_changed",
               "fence_accepted", "fence_refused", "gap", "reset", "unobserved",
               "candidate_queued", "candidate_left", "cluster", "lease"];

  function setStatus(cls, text, title) {
    if (!badge) return;
    badge.hidden = false;
    badge.className = "pill live " + cls;
    badge.textContent = text;
    badge.title = title || "";
  }

  // "Leading for" keeps counting between updates, on the server's clock.
  var skew = Number(body.getAttribute("data-now")) - Date.now() || 0;
  function fmt(ms) {
    if (ms < 0) ms = 0;
    if (ms < 1000) return ms + "ms";
    if (ms < 60000) return (ms / 1000).toFixed(1) + "s";
    var s = Math.floor(ms / 1000);
    function two(n) { return (n < 10 ? "0" : "") + n; }
    if (s < 3600) return Math.floor(s / 60) + "m " + two(s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + two(Math.floor(s / 60) % 60) + "m";
    return Math.floor(s / 86400) + "d " + two(Math.floor(s / 3600) % 24) + "h";
  }
  function tick() {
    var now = Date.now() + skew;
    var els = document.querySelectorAll("[data-since]");
    for (var i = 0; i < els.length; i++) {
      var since = Number(els[i].getAttribute("data-since"));
      if (since > 0) els[i].textContent = fmt(now - since);
    }
    // A Lease's "runs out": counts down between its renewals (each one,
    // and its lapse, comes on the feed as `event: lease`).
    var until = document.querySelectorAll("[data-until]");
    for (var j = 0; j < until.length; j++) {
      var at = Number(until[j].getAttribute("data-until"));
      until[j].textContent = at > now ? "in " + fmt(at - now) : "ran out " + fmt(now - at) + " ago";
    }
  }
  setInterval(tick, 1000);

  if (!mode) return; // an error page
  if (mode === "off") {
    setStatus("", "not live", "this window ends in the past: pick a preset to follow live changes");
    return;
  }
  if (!window.EventSource || !window.fetch || !window.DOMParser) return;

  var timer = null, inflight = false, again = false;

  function maxRevision() {
    var max = 0, rows = document.querySelectorAll("#events tr[data-revision]");
    for (var i = 0; i < rows.length; i++) {
      max = Math.max(max, Number(rows[i].getAttribute("data-revision")));
    }
    return max;
  }

  function refresh() {
    timer = null;
    if (inflight) { again = true; return; }
    inflight = true;
    var before = maxRevision();
    fetch(window.location.href, { cache: "no-store", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var parts = document.querySelectorAll("[data-swap]");
        for (var i = 0; i < parts.length; i++) {
          var fresh = doc.getElementById(parts[i].id);
          if (fresh) parts[i].replaceWith(document.importNode(fresh, true));
        }
        if (before > 0) {
          var rows = document.querySelectorAll("#events tr[data-revision]");
          for (var j = 0; j < rows.length; j++) {
            if (Number(rows[j].getAttribute("data-revision")) > before) rows[j].classList.add("fresh");
          }
        }
        tick();
      })
      .catch(function (e) { setStatus("down", "update failed", String(e)); })
      .then(function () {
        inflight = false;
        if (again) { again = false; schedule(); }
      });
  }

  function schedule() {
    if (mode === "reload") { window.location.reload(); return; }
    if (!timer) timer = setTimeout(refresh, 150);
  }

  var url = "/api/v1/events" + (election ? "?election=" + encodeURIComponent(election) : "");
  var source = new EventSource(url);
  for (var i = 0; i < TYPES.length; i++) source.addEventListener(TYPES[i], schedule);
  // Fell behind the feed: re-read everything.
  source.addEventListener("lagged", function () { window.location.reload(); });
  // (Re)opened: what happened before it subscribed (between the page's
  // render and now, or while it was down) came on no feed: read it again.
  source.onopen = function () {
    setStatus("on", "live", "updates arrive as they happen");
    schedule();
  };
  source.onerror = function () { setStatus("down", "reconnecting…", "the live feed dropped; retrying"); };
  // Open terms and "now" move even when nothing happens (a page may ask for
  // another period with data-refresh, in ms; a Kubernetes Lease's renewals
  // and lapse come on the feed as `event: lease`).
  var every = Number(body.getAttribute("data-refresh")) || 30000;
  setInterval(function () { if (!document.hidden && mode === "swap") schedule(); }, every);
})();
