"""The four commands, each a short pipeline over the layers below: inspect, compare, check and
convert (a package: plan, config, produce, publish). Commands never import each other."""
