#!/usr/bin/env bash
# Refresh the dashboard's browser-side assets from the npm registry (run by hand when upgrading; the files
# are committed, so nothing is fetched at run time and no CDN is ever used). Versions are pinned here and
# in VERSIONS; the sha256 of every file is recorded there too.
set -euo pipefail
cd "$(dirname "$0")"
HTMX=2.0.8
UPLOT=1.6.32
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "htmx.org@$HTMX" "uplot@$UPLOT" >/dev/null)
tar -xzf "$tmp/htmx.org-$HTMX.tgz" -C "$tmp" package/dist/htmx.min.js && mv "$tmp/package/dist/htmx.min.js" .
rm -rf "$tmp/package"
tar -xzf "$tmp/uplot-$UPLOT.tgz" -C "$tmp" package/dist/uPlot.iife.min.js package/dist/uPlot.min.css package/LICENSE
mv "$tmp/package/dist/uPlot.iife.min.js" "$tmp/package/dist/uPlot.min.css" . && mv "$tmp/package/LICENSE" LICENSE.uplot
{
  echo "htmx.org $HTMX (BSD-2-Clause) https://www.npmjs.com/package/htmx.org"
  echo "uplot $UPLOT (MIT) https://www.npmjs.com/package/uplot"
  sha256sum htmx.min.js uPlot.iife.min.js uPlot.min.css
} > VERSIONS
