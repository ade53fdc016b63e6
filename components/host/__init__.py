"""What is shipped to a box as text: the templates, the preflight, the weights check and the
Kubernetes target lister. These files run on hosts and in containers, not in the program."""
