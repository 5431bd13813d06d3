// den web: the little JavaScript there is. Pages work without it; with it,
// times show in the browser's time zone, the overview and the task list
// reload themselves, and a running task's output is polled until it ends.
"use strict";

function localTimes(root) {
  root.querySelectorAll("time[datetime]").forEach(function (el) {
    var d = new Date(el.getAttribute("datetime"));
    if (!isNaN(d)) { el.title = el.textContent; el.textContent = d.toLocaleString(); }
  });
}

// Reload the live region of the page every data-refresh seconds, unless
// the box is unticked or someone is typing in a form of it.
function autoRefresh() {
  var live = document.getElementById("live");
  var box = document.getElementById("autorefresh");
  if (!live || !live.dataset.refresh || !box) return;
  box.checked = localStorage.getItem("den.autorefresh") !== "off";
  box.addEventListener("change", function () { localStorage.setItem("den.autorefresh", box.checked ? "on" : "off"); });
  setInterval(function () {
    if (!box.checked || document.hidden) return;
    var a = document.activeElement;
    if (a && live.contains(a) && (a.tagName === "INPUT" || a.tagName === "SELECT")) return;
    fetch(location.href, { credentials: "same-origin" }).then(function (r) {
      if (!r.ok) throw new Error(r.status);
      return r.text();
    }).then(function (html) {
      var doc = new DOMParser().parseFromString(html, "text/html");
      var fresh = doc.getElementById("live");
      if (fresh) { live.innerHTML = fresh.innerHTML; localTimes(live); }
    }).catch(function () { /* keep the last page; try again next time */ });
  }, Number(live.dataset.refresh) * 1000);
}

// Poll a running task's stdout and stderr from where the page stopped,
// appending what is new; when the task has ended, reload the page once
// for its final state.
function liveOutput() {
  var task = document.getElementById("task");
  if (!task || !task.dataset.live) return;
  var id = task.dataset.task;
  var streams = Array.prototype.slice.call(document.querySelectorAll("pre.output[data-stream]"));
  var ended = {};
  function poll(pre) {
    var name = pre.dataset.stream;
    var url = "/tasks/" + id + "/output?stream=" + name + "&from=" + (pre.dataset.next || 0);
    return fetch(url, { credentials: "same-origin" }).then(function (r) { return r.json(); }).then(function (o) {
      if (o.error) throw new Error(o.error);
      if (o.reset) pre.textContent = "";
      if (o.skipped) pre.appendChild(document.createTextNode("\n[… " + o.skipped + " bytes written faster than shown; all of it shows when the task ends …]\n"));
      if (o.data) {
        var atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        pre.appendChild(document.createTextNode(o.data));
        if (atEnd) pre.scrollTop = pre.scrollHeight;
      }
      pre.dataset.next = o.next;
      var size = document.getElementById(name + "-size");
      if (size) size.textContent = o.total + " bytes so far";
      var st = document.getElementById("status");
      if (st && o.status_name) {
        st.textContent = (o.status === null ? "?" : o.status) + " " + o.status_name;
        st.className = "status " + o.group;
      }
      if (o.more) return poll(pre);
      ended[name] = o.ended;
    });
  }
  function round() {
    Promise.all(streams.map(poll)).then(function () {
      if (streams.every(function (p) { return ended[p.dataset.stream]; })) {
        task.dataset.ended = "1";
        var note = document.getElementById("livenote");
        if (note) note.textContent = "ended";
        setTimeout(function () { location.replace(location.pathname); }, 500);
        return;
      }
      setTimeout(round, 2000);
    }).catch(function () { setTimeout(round, 5000); });
  }
  setTimeout(round, 1000);
}

document.addEventListener("DOMContentLoaded", function () {
  localTimes(document);
  autoRefresh();
  liveOutput();
});
