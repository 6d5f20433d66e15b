#!/bin/bash
set -e
cd /app/site
lost=$(git reflog --format='%H %gs' | grep 'commit: add contact address' | head -n1 | cut -d' ' -f1)
git -c user.name=dev -c user.email=dev@example.com merge -q --no-edit "$lost"
