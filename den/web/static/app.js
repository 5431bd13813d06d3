// den web: the little JavaScript there is. Pages work without it; with it,
// times show in the browser's time zone, the overview, queue and task
// lists update live, and a running task's output is polled until it ends.
"use strict";

function localTimes(root) {
  root.querySelectorAll("time[datetime]").forEach(function (el) {
    var d = new Date(el.getAttribute("datetime"));
    if (!isNaN(d)) { el.title = el.textContent; el.textContent = d.toLocaleString(); }
  });
}

// Keep the page's lists and counts up to date without reloading it:
// every data-refresh seconds, while the tab is visible and the box is
// ticked, ask GET /live whether the pages' change token is still the one
// this page was made after (data-live); the answer is 204 while it is, and
// costs no database read (the server makes the token once per interval
// for every viewer). When it changed, fetch this page (marked X-Den-Live:
// for viewers not logged in, the server renders it once per token for
// all of them) and put its new <main> in place of the old; the minute alone changing does so only for
// a page with charts, whose window moves with the clock. A page where
// someone is typing, or whose form fields were changed (a ticked box),
// waits until they are left alone; open <details> stay open, and the
// scroll position stays where it was.
function liveUpdates() {
  var live = document.getElementById("live");
  var box = document.getElementById("autorefresh");
  if (!live || !live.dataset.refresh || !box) return;
  box.checked = localStorage.getItem("den.autorefresh") !== "off";
  box.addEventListener("change", function () { localStorage.setItem("den.autorefresh", box.checked ? "on" : "off"); });
  var every = Number(live.dataset.refresh) * 1000;
  var timer = null, busy = false;
  function dataOf(token) { return (token || "").split(".")[0]; }
  function touched() {
    var a = document.activeElement;
    if (a && live.contains(a) && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName)) return true;
    return Array.prototype.some.call(live.querySelectorAll("input, select, textarea"), function (el) {
      if (el.type === "checkbox" || el.type === "radio") return el.checked !== el.defaultChecked;
      if (el.tagName === "SELECT") {
        if (el.multiple) return Array.prototype.some.call(el.options, function (o) { return o.selected !== o.defaultSelected; });
        var def = el.options.length ? 0 : -1; // with none marked selected, the first is
        Array.prototype.forEach.call(el.options, function (o, i) { if (o.defaultSelected) def = i; });
        return el.selectedIndex !== def;
      }
      if (el.type === "hidden") return false;
      return el.value !== el.defaultValue;
    });
  }
  // hold says, on the page and in data-held, that a change waits for
  // the form to be left alone.
  function hold(on) {
    var label = box.parentNode;
    if (on) { live.dataset.held = "1"; label.classList.add("held"); label.title = "The page changed; it updates once its form is sent or put back as it was."; }
    else { delete live.dataset.held; label.classList.remove("held"); label.removeAttribute("title"); }
  }
  function swap(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var fresh = doc.getElementById("live");
    if (!fresh) return;
    var open = {};
    live.querySelectorAll("details[open]").forEach(function (d, i) { open[d.id || ("#" + i)] = true; });
    var x = window.scrollX, y = window.scrollY;
    live.innerHTML = fresh.innerHTML;
    live.dataset.live = fresh.dataset.live || "";
    hold(false);
    live.querySelectorAll("details").forEach(function (d, i) { if (open[d.id || ("#" + i)]) d.open = true; });
    localTimes(live);
    window.scrollTo(x, y);
    live.dispatchEvent(new CustomEvent("den:updated"));
  }
  function check() {
    timer = null;
    if (document.hidden) return; // visibilitychange starts it again
    if (!box.checked || busy) { schedule(); return; }
    busy = true;
    var had = live.dataset.live || "";
    fetch("/live?since=" + encodeURIComponent(had), { credentials: "same-origin", cache: "no-store" }).then(function (r) {
      if (r.status === 204) return null;
      if (!r.ok) throw new Error(r.status);
      return r.json();
    }).then(function (o) {
      if (!o || !o.token) return;
      var charts = live.querySelector("svg.chart") !== null;
      if (dataOf(o.token) === dataOf(had) && !charts) { live.dataset.live = o.token; return; }
      if (touched()) { hold(true); return; } // asked again next time, with the old token
      return fetch(location.href, { credentials: "same-origin", cache: "no-store", headers: { "X-Den-Live": "1" } }).then(function (r) {
        if (!r.ok) throw new Error(r.status);
        return r.text();
      }).then(swap);
    }).catch(function () { /* keep the page as it is; ask again next time */ }).then(function () {
      busy = false;
      schedule();
    });
  }
  function schedule() { if (timer === null && !document.hidden) timer = setTimeout(check, every); }
  document.addEventListener("visibilitychange", function () {
    if (document.hidden) { if (timer !== null) { clearTimeout(timer); timer = null; } return; }
    if (timer === null && !busy) timer = setTimeout(check, 0);
  });
  schedule();
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
  liveUpdates();
  liveOutput();
});
