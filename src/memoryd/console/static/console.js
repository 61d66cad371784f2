// memoryd console: the page's only script (served from the package; the CSP allows no other).
// A checkbox with data-select-all="NAME" ticks or unticks every checkbox named NAME in its form.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("input[data-select-all]").forEach(function (box) {
    box.addEventListener("change", function () {
      var name = box.getAttribute("data-select-all");
      box.form.querySelectorAll('input[type=checkbox][name="' + name + '"]').forEach(function (other) {
        other.checked = box.checked;
      });
    });
  });
});
