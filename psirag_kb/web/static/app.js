// psirag-kb's page: streams an answer's steps (server-sent events) when JavaScript is on.
(function () {
  "use strict";
  var source = null;

  function stream(section) {
    if (source) { source.close(); source = null; }
    var url = section.getAttribute("data-stream");
    if (!url || section.getAttribute("data-started")) { return; }
    section.setAttribute("data-started", "1");
    var steps = document.getElementById("steps");
    var slot = document.getElementById("answer-slot");
    var working = document.getElementById("working");
    source = new EventSource(url);
    source.addEventListener("step", function (event) {
      var step = JSON.parse(event.data);
      var item = document.createElement("li");
      item.textContent = "retrieval " + step.n + ": " + step.query + " (" + step.passages +
        " new passages)";
      steps.appendChild(item);
    });
    source.addEventListener("answer", function (event) {
      slot.innerHTML = JSON.parse(event.data);  // rendered and escaped by the server
      if (working) { working.remove(); }
      source.close();
      source = null;
    });
    source.addEventListener("failed", function (event) {
      if (working) { working.textContent = JSON.parse(event.data); }
      source.close();
      source = null;
    });
    source.onerror = function () {  // a lost connection, an ended session, a refused request
      if (source) { source.close(); source = null; }
      if (working && working.isConnected) {
        working.textContent = "The answer stopped arriving (the connection was lost or your " +
          "session ended); reload the page to ask again.";
        working.className = "working problem";
      }
    };
  }

  function start() {
    var fields = document.querySelectorAll("form.ask input[name=js]");
    for (var i = 0; i < fields.length; i++) { fields[i].value = "1"; }
    var section = document.querySelector("section[data-stream]");
    if (section) { stream(section); }
  }

  // the topic map: the area under the pointer or the keyboard's focus described beside it
  function describe(event) {
    var area = event.target.closest ? event.target.closest(".topic-map a[data-node]") : null;
    var panel = document.getElementById("map-detail");
    if (!area || !panel) { return; }
    var found = document.getElementById("detail-" + area.getAttribute("data-node"));
    if (!found) { return; }
    var copy = found.cloneNode(true);  // the server's escaped markup, copied as nodes
    copy.removeAttribute("id");
    panel.replaceChildren(copy);
  }

  document.addEventListener("focusin", describe);
  document.addEventListener("mouseover", describe);
  document.addEventListener("DOMContentLoaded", start);
  document.addEventListener("htmx:afterSettle", start);
})();
