// run.js follows a running run on its portal page: it asks the portal for
// the run's events after the last one shown (the portal holds the request
// until there is one, the run ends or 25 seconds pass), appends their
// output and rows, and updates the state when the run ends. Without it the
// page offers a reload link.
(function () {
  "use strict";

  var live = document.getElementById("live");
  if (!live || !window.fetch) {
    return;
  }
  var url = live.getAttribute("data-events");
  var after = Number(live.getAttribute("data-after")) || 0;
  var log = document.getElementById("log");
  var rows = document.querySelector("#events tbody");
  var state = document.getElementById("state");
  var exit = document.getElementById("exit");
  var failures = 0;

  live.textContent = "Following the run as it goes.";

  function stamp(iso) {
    var d = new Date(iso);
    if (isNaN(d.getTime())) {
      return iso || "";
    }
    return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  }

  function cell(row, text) {
    var td = document.createElement("td");
    td.textContent = text == null ? "" : String(text);
    row.appendChild(td);
  }

  function add(ev) {
    if (ev.seq <= after) {
      return;
    }
    after = ev.seq;
    var isOutput = ev.stream === "stdout" || ev.stream === "stderr";
    if (isOutput && (ev.type === "output" || ev.type === ev.stream)) {
      log.appendChild(document.createTextNode(ev.message || ev.data || ""));
    }
    var row = document.createElement("tr");
    cell(row, ev.seq);
    cell(row, ev.type);
    cell(row, ev.phase);
    cell(row, ev.message);
    cell(row, stamp(ev.createdAt));
    rows.appendChild(row);
  }

  function ended(answer) {
    state.textContent = answer.state;
    state.className = "state state-" + answer.state;
    if (answer.exitCode != null) {
      exit.textContent = String(answer.exitCode);
    }
    live.textContent = "The run ended. ";
    var again = document.createElement("a");
    again.href = window.location.pathname;
    again.textContent = "Reload for its stored log.";
    live.appendChild(again);
  }

  function gaveUp() {
    live.textContent = "Lost the run's events. ";
    var again = document.createElement("a");
    again.href = window.location.pathname;
    again.textContent = "Reload";
    live.appendChild(again);
  }

  function next() {
    fetch(url + "?after=" + after + "&wait=25s", {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
      cache: "no-store",
    })
      .then(function (resp) {
        if (!resp.ok) {
          throw new Error("status " + resp.status);
        }
        return resp.json();
      })
      .then(function (answer) {
        failures = 0;
        answer.events.forEach(add);
        if (answer.state !== "running" && answer.events.length < 500) {
          ended(answer);
          return;
        }
        next();
      })
      .catch(function () {
        failures += 1;
        if (failures > 5) {
          gaveUp();
          return;
        }
        window.setTimeout(next, 2000 * failures);
      });
  }

  next();
})();
