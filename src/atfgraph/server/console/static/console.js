/* atfgraph console: the one script, served from /static/console.js (no CDN, no inline code).

   1. Live regions. An element <main data-live-url="..."> names a fragment endpoint; every
      2 seconds the script fetches it and replaces each element marked data-live="NAME" with the
      fragment's element of the same name. A region the reviewer is working in is left alone:
      one holding the focused element, or any field whose value differs from the value the
      server rendered (a half-typed response). Polling stops when the fragment says
      data-terminal="true", when the tab is hidden (it resumes when shown), or on any answer
      other than 200 (a session that ended is noticed on the next navigation).
   2. Local time. <time datetime=ISO> shows the reader's local time; the UTC text stays in its
      title.
   Schema forms need no script: the server reads their fields, types them by the schema and
   validates the answer (it is the authority). */
(function () {
  "use strict";

  var POLL_MS = 2000;

  function isDirty(region) {
    if (region.contains(document.activeElement) && document.activeElement !== document.body) {
      return true;
    }
    var fields = region.querySelectorAll("input, textarea, select");
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if (f.type === "hidden") continue;
      if (f.type === "checkbox" || f.type === "radio") {
        if (f.checked !== f.defaultChecked) return true;
      } else if (f.tagName === "SELECT") {
        for (var j = 0; j < f.options.length; j++) {
          if (f.options[j].selected !== f.options[j].defaultSelected) return true;
        }
      } else if (f.value !== f.defaultValue) {
        return true;
      }
    }
    return false;
  }

  function localTimes(root) {
    var times = root.querySelectorAll("time[datetime]");
    for (var i = 0; i < times.length; i++) {
      var t = times[i];
      if (t.dataset.local) continue;
      var when = new Date(t.getAttribute("datetime"));
      if (isNaN(when.getTime())) continue;
      if (!t.title) t.title = t.textContent.trim();
      t.textContent = when.toLocaleString(undefined, {
        year: "numeric", month: "2-digit", day: "2-digit",
        hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short"
      });
      t.dataset.local = "1";
    }
  }

  // A <details data-key="..."> the reader opened stays open when its region is replaced.
  function keepOpen(current, node) {
    var opened = current.querySelectorAll("details[data-key][open]");
    for (var i = 0; i < opened.length; i++) {
      var key = opened[i].getAttribute("data-key");
      var twin = node.querySelector('details[data-key="' + CSS.escape(key) + '"]');
      if (twin) twin.open = true;
    }
  }

  function startLive(main) {
    var url = main.getAttribute("data-live-url");
    var timer = null;
    var stopped = false;

    function schedule() {
      if (!stopped && !document.hidden) timer = window.setTimeout(poll, POLL_MS);
    }

    function apply(html) {
      var doc = new DOMParser().parseFromString(html, "text/html");
      var fresh = doc.querySelectorAll("[data-live]");
      for (var i = 0; i < fresh.length; i++) {
        var name = fresh[i].getAttribute("data-live");
        var current = document.querySelector('[data-live="' + name + '"]');
        if (!current || isDirty(current)) continue;
        if (current.innerHTML === fresh[i].innerHTML) continue;
        var node = document.importNode(fresh[i], true);
        keepOpen(current, node);
        current.replaceWith(node);
        localTimes(node);
      }
      var state = doc.querySelector("[data-terminal]");
      if (state && state.getAttribute("data-terminal") === "true") {
        stopped = true;
        var note = document.getElementById("live-note");
        if (note) note.textContent = "The run has ended; this page no longer updates.";
      }
    }

    function poll() {
      timer = null;
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" }, redirect: "error" })
        .then(function (r) {
          if (r.status !== 200) { stopped = true; return null; }
          return r.text();
        })
        .then(function (html) { if (html !== null) apply(html); schedule(); })
        .catch(function () { schedule(); });
    }

    document.addEventListener("visibilitychange", function () {
      if (!document.hidden && timer === null && !stopped) poll();
    });
    schedule();
  }

  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    var main = document.querySelector("main[data-live-url]");
    if (main) startLive(main);
  });
})();
