#!/bin/bash
set -e
cd /app
git apply /solution/fix.patch
