// qlsched ui: refresh the overview's figures every 10 s while the tab is visible.
// Optional: every page works without it (reload the page for fresh figures).
(function () {
  "use strict";
  var main = document.querySelector("main[data-refresh]");
  if (!main || !window.fetch || !window.DOMParser) { return; }
  function refresh() {
    if (document.visibilityState !== "visible") { return; }
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("main");
        if (fresh) { main.replaceChildren.apply(main, Array.from(fresh.childNodes)); }
      })
      .catch(function () {});
  }
  window.setInterval(refresh, 10000);
})();
