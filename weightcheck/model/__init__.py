"""The canonical model of a drafter: its config normalized (config.py), tensor names in canonical
form (dialects.py), the inventory its architecture implies (inventory.py), the drafter and target
built from a source (drafter.py, target.py), and whether two drafters are the same model
(compatibility.py). Dialects and architectures are data in mappings/."""
